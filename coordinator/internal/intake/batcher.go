package intake

import (
	"context"
	"errors"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
)

// Batcher gathers the usage batches of many reports into one Raft entry
// per apply window, so the log grows by one entry per window, never one per
// report or per key. A report is acknowledged only once its entry is
// committed and applied.
type Batcher struct {
	in     chan pendingUsage
	window time.Duration
	max    int
	apply  func(*fsmpb.ReportsCommand) (*fsmpb.ReportsResult, error)
	now    func() time.Time
}

type pendingUsage struct {
	usage *fsmpb.AgentUsage
	done  chan Result
}

// Result is what became of one report's usage batch.
type Result struct {
	// Acked is the incarnation's last batch the ledger holds.
	Acked uint64
	// Moved are the slots of the batch this group does not own: the
	// batch was not applied (see state.ReportsResult).
	Moved []uint32
	// Stale says the batch was refused as stale: its incarnation had been
	// forgotten, and it was recorded as applied, none of it counted
	// (state.StaleBatchAge).
	Stale bool
	// Err is why the batch was not applied: the entry failed, or the
	// batcher stopped.
	Err error
}

// ErrStopped fails the batches queued when the batcher stops.
var ErrStopped = errors.New("coordinator: shutting down")

// NewBatcher returns a batcher that proposes each entry with apply.
func NewBatcher(window time.Duration, apply func(*fsmpb.ReportsCommand) (*fsmpb.ReportsResult, error), now func() time.Time) *Batcher {
	return &Batcher{in: make(chan pendingUsage, 4096), window: window, max: 2048, apply: apply, now: now}
}

// Submit queues a usage batch and returns where its result will arrive.
func (b *Batcher) Submit(ctx context.Context, u *fsmpb.AgentUsage) (<-chan Result, error) {
	p := pendingUsage{usage: u, done: make(chan Result, 1)}
	select {
	case b.in <- p:
		return p.done, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Run applies gathered batches until ctx ends; whatever is queued then is
// failed so that agents re-send it.
func (b *Batcher) Run(ctx context.Context) {
	var pending []pendingUsage
	for {
		select {
		case <-ctx.Done():
			b.fail(pending, ErrStopped)
			for {
				select {
				case p := <-b.in:
					p.done <- Result{Err: ErrStopped}
				default:
					return
				}
			}
		case p := <-b.in:
			pending = append(pending[:0], p)
			timer := time.NewTimer(b.window)
		gather:
			for len(pending) < b.max {
				select {
				case p := <-b.in:
					pending = append(pending, p)
				case <-timer.C:
					break gather
				case <-ctx.Done():
					break gather
				}
			}
			timer.Stop()
			b.flush(pending)
			pending = pending[:0]
		}
	}
}

func (b *Batcher) flush(pending []pendingUsage) {
	now := b.now().UnixNano()
	cmd := &fsmpb.ReportsCommand{ProposedUnixNano: now, StaleBeforeUnixNano: state.StaleBefore(now), Reports: make([]*fsmpb.AgentUsage, len(pending))}
	for i, p := range pending {
		cmd.Reports[i] = p.usage
	}
	res, err := b.apply(cmd)
	if err != nil {
		b.fail(pending, err)
		return
	}
	moved := make(map[uint32][]uint32, len(res.GetMoved()))
	for _, m := range res.GetMoved() {
		moved[m.GetReport()] = m.GetSlots()
	}
	stale := make(map[uint32]bool, len(res.GetStale()))
	for _, i := range res.GetStale() {
		stale[i] = true
	}
	for i, p := range pending {
		p.done <- Result{Acked: res.GetAckedSeq()[i], Moved: moved[uint32(i)], Stale: stale[uint32(i)]}
	}
}

func (b *Batcher) fail(pending []pendingUsage, err error) {
	for _, p := range pending {
		p.done <- Result{Err: err}
	}
}
