package coordinator

import (
	"context"
	"errors"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
)

// batcher gathers the usage batches of many reports into one Raft entry
// per apply window, so the log grows by one entry per window, never one per
// report or per key. A report is acknowledged only once its entry is
// committed and applied.
type batcher struct {
	in     chan pendingUsage
	window time.Duration
	max    int
	apply  func(*fsmpb.ReportsCommand) (*fsmpb.ReportsResult, error)
	now    func() time.Time
}

type pendingUsage struct {
	usage *fsmpb.AgentUsage
	done  chan batchResult
}

type batchResult struct {
	acked uint64
	// moved are the slots of the batch this group does not own: the
	// batch was not applied (see state.ReportsResult).
	moved []uint32
	// stale says the batch was refused as stale: its incarnation had been
	// forgotten, and it was recorded as applied, none of it counted
	// (state.StaleBatchAge).
	stale bool
	err   error
}

var errStopped = errors.New("coordinator: shutting down")

func newBatcher(window time.Duration, apply func(*fsmpb.ReportsCommand) (*fsmpb.ReportsResult, error), now func() time.Time) *batcher {
	return &batcher{in: make(chan pendingUsage, 4096), window: window, max: 2048, apply: apply, now: now}
}

// submit queues a usage batch and returns where its result will arrive.
func (b *batcher) submit(ctx context.Context, u *fsmpb.AgentUsage) (<-chan batchResult, error) {
	p := pendingUsage{usage: u, done: make(chan batchResult, 1)}
	select {
	case b.in <- p:
		return p.done, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run applies gathered batches until ctx ends; whatever is queued then is
// failed so that agents re-send it.
func (b *batcher) run(ctx context.Context) {
	var pending []pendingUsage
	for {
		select {
		case <-ctx.Done():
			b.fail(pending, errStopped)
			for {
				select {
				case p := <-b.in:
					p.done <- batchResult{err: errStopped}
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

func (b *batcher) flush(pending []pendingUsage) {
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
		p.done <- batchResult{acked: res.GetAckedSeq()[i], moved: moved[uint32(i)], stale: stale[uint32(i)]}
	}
}

func (b *batcher) fail(pending []pendingUsage, err error) {
	for _, p := range pending {
		p.done <- batchResult{err: err}
	}
}
