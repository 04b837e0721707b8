package intake

import (
	"context"
	"sync"
)

// LeaderCheck confirms that this member still leads before it answers an
// agent, sharing one confirmation among the reports that wait at the same
// time.
//
// Leadership notifications arrive late: a leader cut off from its
// followers believes it leads until its lease runs out, and meanwhile
// another member may have been elected and granted the same allowance. So
// before answering, a report waits for a verification (Raft's
// VerifyLeader: a round of heartbeats a quorum acknowledges) that started
// after the report arrived. One that was already under way when the report
// arrived proves nothing about the report: it could have been answered
// from before the quorum was lost. Reports arriving while one verification
// runs therefore wait for the next, which starts when the current one ends
// and serves them all, so there are never more than two rounds for any
// number of waiting reports, and at most one runs at a time.
type LeaderCheck struct {
	verify func() error

	mu      sync.Mutex
	running bool       // a goroutine is running rounds
	pending *checkTurn // the next round: every waiter since the last one started
}

// checkTurn is one verification round and the reports waiting for it.
type checkTurn struct {
	done    chan struct{}
	err     error // set before done is closed
	waiters int   // reports that joined it, under LeaderCheck.mu
}

// NewLeaderCheck returns a check that confirms leadership with verify.
func NewLeaderCheck(verify func() error) *LeaderCheck {
	return &LeaderCheck{verify: verify}
}

// Wait returns once a verification that started after the call has ended:
// nil if it confirmed leadership, its error otherwise, or ctx's error if
// ctx ends first (the round goes on for the others).
func (l *LeaderCheck) Wait(ctx context.Context) error {
	l.mu.Lock()
	if l.pending == nil {
		l.pending = &checkTurn{done: make(chan struct{})}
	}
	turn := l.pending
	turn.waiters++
	if !l.running {
		l.running = true
		go l.run()
	}
	l.mu.Unlock()
	select {
	case <-turn.done:
		return turn.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run verifies, round after round, while reports wait, then ends. A round
// takes the waiters gathered so far and starts after taking them, so it
// started after each of them arrived.
func (l *LeaderCheck) run() {
	for {
		l.mu.Lock()
		turn := l.pending
		l.pending = nil
		if turn == nil {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		turn.err = l.verify()
		close(turn.done)
	}
}
