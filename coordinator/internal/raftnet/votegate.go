package raftnet

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// ErrNoStateYet answers a leadership transfer to a member with no state.
var ErrNoStateYet = errors.New("coordinator: this member has no Raft state yet and takes no part in elections")

// VoteGate wraps the Raft transport of a member and refuses, on its
// behalf, every vote, pre-vote and leadership transfer asked of it while it
// has no Raft state.
//
// A member with no state has forgotten its term and its vote. Raft grants
// a vote to any candidate when its configuration is empty (it takes the
// cluster to be bootstrapping), so a member that lost its disk and comes
// back under its old name could vote a second time in a term where it
// already voted, and two leaders could be elected in one term. The gate
// stays shut until the member has a log: one it bootstrapped itself, or
// one a leader replicated to it, which brings the cluster's current term
// with it. From then on the member votes as any other.
type VoteGate struct {
	raft.Transport
	out     chan raft.RPC
	hasLog  atomic.Pointer[func() bool]
	log     hclog.Logger
	warned  atomic.Bool
	stop    chan struct{}
	stopped sync.Once
}

// NewVoteGate wraps t. Until open is set (SetHasLog), every vote is
// refused.
func NewVoteGate(t raft.Transport, log hclog.Logger) *VoteGate {
	g := &VoteGate{Transport: t, out: make(chan raft.RPC), log: log, stop: make(chan struct{})}
	go g.run(t.Consumer())
	return g
}

// SetHasLog tells the gate how to know the member has a log.
func (g *VoteGate) SetHasLog(fn func() bool) { g.hasLog.Store(&fn) }

func (g *VoteGate) open() bool {
	fn := g.hasLog.Load()
	return fn != nil && (*fn)()
}

// Consumer implements raft.Transport: the RPCs that pass the gate.
func (g *VoteGate) Consumer() <-chan raft.RPC { return g.out }

func (g *VoteGate) run(in <-chan raft.RPC) {
	for {
		select {
		case <-g.stop:
			return
		case rpc := <-in:
			if g.refuse(rpc) {
				continue
			}
			select {
			case g.out <- rpc:
			case <-g.stop:
				return
			}
		}
	}
}

// refuse answers rpc itself when the gate is shut and it asks for a vote
// or a leadership transfer.
func (g *VoteGate) refuse(rpc raft.RPC) bool {
	switch req := rpc.Command.(type) {
	case *raft.RequestVoteRequest:
		if g.open() {
			return false
		}
		g.warn()
		rpc.Respond(&raft.RequestVoteResponse{RPCHeader: req.RPCHeader, Term: req.Term, Granted: false}, nil)
	case *raft.RequestPreVoteRequest:
		if g.open() {
			return false
		}
		g.warn()
		rpc.Respond(&raft.RequestPreVoteResponse{RPCHeader: req.RPCHeader, Term: req.Term, Granted: false}, nil)
	case *raft.TimeoutNowRequest:
		if g.open() {
			return false
		}
		rpc.Respond(nil, ErrNoStateYet)
	default:
		return false
	}
	return true
}

func (g *VoteGate) warn() {
	if !g.warned.Swap(true) {
		g.log.Info("refusing votes until this member has the cluster's log: it has no Raft state, and a member that lost its state must not vote with a forgotten term")
	}
}

// RequestPreVote implements raft.WithPreVote, as the wrapped transport does.
func (g *VoteGate) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pv, ok := g.Transport.(raft.WithPreVote)
	if !ok {
		return errors.New("coordinator: the transport does not support pre-vote")
	}
	return pv.RequestPreVote(id, target, args, resp)
}

// Close implements raft.WithClose: it stops the gate and closes the
// wrapped transport.
func (g *VoteGate) Close() error {
	g.stopped.Do(func() { close(g.stop) })
	if c, ok := g.Transport.(raft.WithClose); ok {
		return c.Close()
	}
	return nil
}
