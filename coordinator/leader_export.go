package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/ledger"
)

// Exporting the ledger to a sink (Config.LedgerSink), on the leader. The
// exporter first reads the sink's stored position and compares it with
// the one Raft committed:
//
//   - the sink is ahead (a leader committed a batch and died before Raft
//     committed the position, or its proposal is still in flight): propose
//     the sink's position, so members drop what the sink already holds.
//     Nothing is written again.
//   - they agree: export from there.
//   - Raft is ahead: the database lost batches it had committed (restored
//     from an older backup, or another database). Export stops and says so
//     (ErrSinkBehind) until an operator decides; see docs/operations.md.
//
// Then it keeps up to Config.ExportParallel batches in flight, each the
// next page of final lines after the position the batch before will
// leave, each in one transaction that moves the stored position from
// that one to the page's last line (ledgersink.Pipeline): the database
// commits them in order, and a batch whose expected position is not the
// stored one (a deposed leader's, one behind a failed batch) writes
// nothing. As each batch commits, the exporter proposes its position
// through Raft. After any failure it drops what is in flight and reads
// the sink's position again.
//
// While the sink is away the rounds retry with backoff and the lines wait
// in the state machine; retention (Config.LedgerRetention) is the bound on
// how long they may wait. Nothing here touches reports or leases: the
// limiter answers as before whatever the database does.

// ErrSinkBehind is the export's error when the sink's stored position is
// behind the one Raft committed.
var ErrSinkBehind = errors.New("the ledger sink's stored position is behind the one the cluster committed: the database lost exported lines")

// Defaults of the export.
const (
	DefaultExportBatch    = 10_000
	DefaultExportParallel = 3
	DefaultExportInterval = 5 * time.Second
	// maxExportParallel bounds ExportParallel: each transaction holds a
	// connection and a batch in memory, and past the database's cores
	// more only queue.
	maxExportParallel = 16
	// exportBackoffMax bounds the wait between failed rounds.
	exportBackoffMax = 30 * time.Second
)

// exportRun is one leader term's exporter: what it knows between rounds.
type exportRun struct {
	c        *Coordinator
	sink     *ledgersink.Sink
	migrated bool
	// dropped is the state's count of lines retention deleted, when the
	// exporter last read it: what it adds to the metric is the increase.
	dropped uint64
	seen    bool
	// gaugesAt is when updateGauges last ran.
	gaugesAt time.Time
	// failing is the cause of the failure streak the log has reported,
	// "" when the last round succeeded.
	failing    string
	lastLogged time.Time
	backoff    time.Duration
	// pipe writes the batches; nil until the exporter has read the
	// sink's position, at the start of the term and after a failure.
	pipe *ledgersink.Pipeline
	// pending is the Raft commit of a position, in flight; next, when
	// hasNext, the newest position the sink committed that is not
	// proposed yet.
	pending chan error
	next    ledger.Position
	hasNext bool
}

// exportLedger runs export rounds until ctx ends (leadership lost).
func (c *Coordinator) exportLedger(ctx context.Context) {
	r := &exportRun{c: c, sink: c.sink}
	defer c.clearExportMetrics()
	defer c.exportFailing.Store(nil) // another member exports now, and says how it fares
	defer func() {
		r.reset() // ctx is done: the transactions in flight end at once
		_ = r.settle()
	}()
	timer := c.cfg.Clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		n, err := r.round(ctx)
		// The gauges read the state under its lock, which waits behind
		// every report being applied: once a second is enough, and
		// back-to-back rounds do not wait for it each time.
		if err != nil || n == 0 || c.now().Sub(r.gaugesAt) >= time.Second {
			r.updateGauges()
		}
		wait := c.cfg.ExportInterval
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			r.reset()
			wait = r.failed(err)
		default:
			r.succeeded()
			if n == c.cfg.ExportBatch || n < 0 || r.pipe != nil && r.pipe.Len() > 0 {
				wait = 0 // more lines wait, or the position just moved
			}
		}
		timer.Reset(wait)
	}
}

// round does one step of the export and returns how many lines it wrote
// (-1 when it only caught the state up with the sink): it tops the
// batches in flight up to Config.ExportParallel, waits for the oldest
// (at most ExportInterval) and proposes its position.
func (r *exportRun) round(ctx context.Context) (int, error) {
	c := r.c
	if !r.migrated {
		mctx, cancel := context.WithTimeout(ctx, c.cfg.ExportTimeout)
		err := r.sink.Migrate(mctx)
		cancel()
		if err != nil {
			return 0, fmt.Errorf("migrating the ledger sink's schema: %w", err)
		}
		r.migrated = true
	}
	if r.pipe == nil {
		if n, err := r.start(ctx); err != nil || n != 0 || r.pipe == nil {
			return n, err
		}
	}
	if err := r.fill(); err != nil {
		return 0, err
	}
	if r.pipe.Len() == 0 {
		// Nothing waits: the last position the sink took goes to Raft.
		return 0, r.settle()
	}
	// The oldest batch may wait a while (on a lock, a slow commit): lines
	// that become final meanwhile go out behind it, looked for every
	// ExportInterval.
	timer := c.cfg.Clock.NewTimer(c.cfg.ExportInterval)
	defer timer.Stop()
	select {
	case <-r.pipe.Ready():
	case <-timer.C():
		return 0, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	res := r.pipe.Wait()
	if res.Err != nil {
		return 0, fmt.Errorf("writing %d ledger lines to the sink: %w", res.Lines, res.Err)
	}
	c.metrics.exportSeconds.Observe(res.Took.Seconds())
	c.metrics.exportedLines.Add(float64(res.Lines))
	// The batch is in the sink: from here a crash loses nothing, the next
	// leader finds the sink ahead and proposes its position.
	return res.Lines, r.propose(res.Position)
}

// start reads the sink's position, compares it with the one Raft
// committed and, unless the sink is behind, starts the pipeline from it.
// It returns -1 when the sink was ahead and its position is now Raft's.
func (r *exportRun) start(ctx context.Context) (int, error) {
	c := r.c
	if err := r.settle(); err != nil {
		return 0, err
	}
	var (
		cluster string
		ours    ledger.Position
	)
	c.fsm.Read(func(s *state.State) { cluster, ours = s.ClusterID(), s.Exported() })
	if cluster == "" {
		return 0, nil // no leader has fixed the cluster's ID yet
	}
	pctx, cancel := context.WithTimeout(ctx, c.cfg.ExportTimeout)
	theirs, err := r.sink.Position(pctx, cluster)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("reading the ledger sink's position: %w", err)
	}
	n := 0
	switch {
	case theirs.After(ours):
		if err := r.commit(theirs); err != nil {
			return 0, err
		}
		c.log.Info("ledger export resumed from the sink's position", "lines", theirs.Lines, "batches", theirs.Batches)
		n = -1
	case ours.After(theirs) || !theirs.After(ours) && ours.Set && ours.Lines != theirs.Lines:
		return 0, fmt.Errorf("%w: the sink holds %d lines up to %v, the cluster committed %d up to %v",
			ErrSinkBehind, theirs.Lines, theirs.Last, ours.Lines, ours.Last)
	}
	r.pipe = r.sink.Pipeline(ctx, cluster, theirs, c.cfg.ExportTimeout)
	return n, nil
}

// fill sends batches until Config.ExportParallel are in flight or no
// final line waits. Each page is read after the position the last batch
// sent leaves: the state still holds the lines up to it, since Raft
// commits only positions the sink has committed.
func (r *exportRun) fill() error {
	c := r.c
	for r.pipe.Len() < c.cfg.ExportParallel {
		var (
			page  []ledger.Line
			after = r.pipe.Tail()
		)
		c.fsm.Read(func(s *state.State) { page = s.ExportPageAfter(after, c.cfg.ExportBatch) })
		if len(page) == 0 {
			return nil
		}
		if err := r.pipe.Send(page); err != nil {
			return fmt.Errorf("writing %d ledger lines to the sink: %w", len(page), err)
		}
	}
	return nil
}

// reset drops the pipeline after a failure, waiting for the batches in
// flight to end (those behind a failed one write nothing): the next
// round reads the sink's position again.
func (r *exportRun) reset() {
	if r.pipe != nil {
		r.pipe.Close()
		r.pipe = nil
	}
}

// propose has Raft commit pos, a position the sink committed: now if no
// commit is in flight, else after it, so that the commits go in order,
// one at a time. Under load a commit waits behind large report entries;
// the positions the sink commits meanwhile fold into the newest, which
// the next round proposes.
func (r *exportRun) propose(pos ledger.Position) error {
	r.next, r.hasNext = pos, true
	if r.pending != nil {
		select {
		case err := <-r.pending:
			r.pending = nil
			if err != nil {
				r.hasNext = false
				return err
			}
		default:
			return nil
		}
	}
	r.proposeNext()
	return nil
}

func (r *exportRun) proposeNext() {
	pos, done := r.next, make(chan error, 1)
	r.hasNext, r.pending = false, done
	go func() { done <- r.commit(pos) }()
}

// settle waits for the commit in flight, if any, then has Raft commit
// the newest position not yet proposed and waits for that too. After an
// error, what was not proposed is left for the sink's position to say.
func (r *exportRun) settle() error {
	for r.pending != nil || r.hasNext {
		if r.pending != nil {
			err := <-r.pending
			r.pending = nil
			if err != nil {
				r.hasNext = false
				return err
			}
		}
		if r.hasNext {
			r.proposeNext()
		}
	}
	return nil
}

// commit proposes pos through Raft: members drop what it covers.
func (r *exportRun) commit(pos ledger.Position) error {
	if _, err := r.c.apply(r.c.ctx, state.CmdExported|state.Ignorable, &fsmpb.ExportedCommand{Position: state.PositionProto(pos)}, 10*time.Second); err != nil {
		return fmt.Errorf("committing the export position through Raft: %w", err)
	}
	return nil
}

// exportFailure is a streak of failed export rounds, as Status shows it
// until a round succeeds (allotpb.LedgerStatus.export_error).
type exportFailure struct {
	err, cause  string
	since, last time.Time
	rounds      uint64
}

// failed counts a failed round, logs the first of a streak and then once
// a minute, and returns how long to wait before the next.
func (r *exportRun) failed(err error) time.Duration {
	cause := ledgersink.Cause(err)
	if errors.Is(err, ErrSinkBehind) {
		cause = "behind"
	}
	if errors.Is(err, ErrNotLeader) {
		cause = "not_leader"
	}
	r.c.metrics.exportErrors.WithLabelValues(cause).Inc()
	f := &exportFailure{err: err.Error(), cause: cause, since: r.c.now(), last: r.c.now(), rounds: 1}
	if prev := r.c.exportFailing.Load(); prev != nil {
		f.since, f.rounds = prev.since, prev.rounds+1
	}
	r.c.exportFailing.Store(f)
	now := time.Now()
	if r.failing != cause || now.Sub(r.lastLogged) >= time.Minute {
		r.c.log.Warn("ledger export failed; the lines wait in the ledger and are retried", "cause", cause, "error", err)
		r.lastLogged = now
	}
	r.failing = cause
	r.backoff = min(max(2*r.backoff, 250*time.Millisecond), exportBackoffMax)
	return r.backoff
}

func (r *exportRun) succeeded() {
	if r.failing != "" {
		r.c.log.Info("ledger export recovered", "after", r.failing)
	}
	r.failing, r.backoff = "", 0
	r.c.exportFailing.Store(nil)
}

// updateGauges sets the backlog's gauges and adds what retention dropped
// unexported.
func (r *exportRun) updateGauges() {
	c := r.c
	r.gaugesAt = c.now()
	var (
		lines, oldest int64
		waiting       bool
		width         int64
		dropped       uint64
	)
	c.fsm.Read(func(s *state.State) {
		n, o, ok := s.ExportBacklog()
		lines, oldest, waiting = int64(n), o, ok
		width, dropped = s.BillingWindowSeconds(), s.RetentionDropped()
	})
	c.metrics.exportPending.Set(float64(lines))
	lag := 0.0
	if waiting {
		lag = math.Max(0, c.now().Sub(time.Unix(oldest+width, 0)).Seconds())
	}
	c.metrics.exportLag.Set(lag)
	if r.seen && dropped > r.dropped {
		c.metrics.exportDropped.Add(float64(dropped - r.dropped))
		c.log.Error("retention deleted ledger lines the sink never received", "lines", dropped-r.dropped, "retention", c.cfg.LedgerRetention)
	}
	r.dropped, r.seen = dropped, true
}

// clearExportMetrics zeroes the leader-only gauges when leadership ends.
func (c *Coordinator) clearExportMetrics() {
	c.metrics.exportPending.Set(0)
	c.metrics.exportLag.Set(0)
}
