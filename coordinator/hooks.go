package coordinator

import (
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm"
	"github.com/hashicorp/raft"
)

// testHooks let this package's tests reach into one member's machinery,
// to make a race or a failure happen when they choose rather than when
// timing allows. Config.hooks is nil outside tests, and every hook is
// optional.
type testHooks struct {
	// beforeApply runs before the state machine applies each log entry,
	// on Raft's apply goroutine: blocking it holds this member's replica
	// behind its log (a follower that lags).
	beforeApply func(*raft.Log)
	// openRequestTimeout, when set, replaces openRequestTimeout
	// (grpclimits.go).
	openRequestTimeout time.Duration
	// httpLimits, when set, changes the HTTP server's limits before it
	// serves (a test shortens them).
	httpLimits func(*httpLimits)
	// leadStep runs before each step of a new leader's preamble, named as
	// preamble names it; an error fails the step.
	leadStep func(step string) error
}

// raftFSM is the state machine Raft drives: the FSM, behind the
// beforeApply hook when a test set one.
func (c *Coordinator) raftFSM() raft.FSM {
	if h := c.cfg.hooks; h != nil && h.beforeApply != nil {
		return hookedFSM{FSM: c.fsm, before: h.beforeApply}
	}
	return c.fsm
}

type hookedFSM struct {
	*fsm.FSM
	before func(*raft.Log)
}

func (h hookedFSM) Apply(l *raft.Log) any {
	h.before(l)
	return h.FSM.Apply(l)
}
