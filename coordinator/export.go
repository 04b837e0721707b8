package coordinator

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
	"github.com/allot-io/allot/coordinator/ledgersink"
)

// Exporting the ledger to a sink (Config.LedgerSink), on the leader. Each
// round reads the sink's stored position, compares it with the one Raft
// committed, and then:
//
//   - the sink is ahead (a leader committed a batch and died before Raft
//     committed the position, or its proposal is still in flight): propose
//     the sink's position, so members drop what the sink already holds.
//     Nothing is written again.
//   - they agree: read the next page of final lines after the position and
//     write it in one transaction that moves the stored position from this
//     one to the page's last line. A second writer (a deposed leader, a
//     retry) finds the position moved and writes nothing. Then propose the
//     new position.
//   - Raft is ahead: the database lost batches it had committed (restored
//     from an older backup, or another database). Export stops and says so
//     (ErrSinkBehind) until an operator decides; see docs/operations.md.
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
	DefaultExportInterval = 5 * time.Second
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
	// failing is the cause of the failure streak the log has reported,
	// "" when the last round succeeded.
	failing    string
	lastLogged time.Time
	backoff    time.Duration
	// stored is the sink's position as this exporter last wrote or read
	// it, when known.
	stored ledgersink.Position
	known  bool
	// pending is the commit of the last batch's position, in flight.
	pending chan error
}

// exportLedger runs export rounds until ctx ends (leadership lost).
func (c *Coordinator) exportLedger(ctx context.Context) {
	r := &exportRun{c: c, sink: c.sink}
	defer c.clearExportMetrics()
	defer func() { _ = r.settle() }()
	timer := c.cfg.Clock.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
		}
		n, err := r.round(ctx)
		r.updateGauges()
		wait := c.cfg.ExportInterval
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			wait = r.failed(err)
		default:
			r.succeeded()
			if n == c.cfg.ExportBatch || n < 0 {
				wait = 0 // more lines wait, or the position just moved
			}
		}
		timer.Reset(wait)
	}
}

// round does one step of the export and returns how many lines it wrote
// (-1 when it only caught the state up with the sink).
//
// Raft's commit of a batch's position runs while the next batch is
// written: under load a commit waits behind large report entries, and
// waiting for it before each write would halve the export's speed. The
// next page is read after the sink's position, whose lines the state
// still holds until the commit lands; the commits go in order, one at a
// time.
func (r *exportRun) round(ctx context.Context) (int, error) {
	c := r.c
	ctx, cancel := context.WithTimeout(ctx, c.cfg.ExportTimeout)
	defer cancel()
	if !r.migrated {
		if err := r.sink.Migrate(ctx); err != nil {
			return 0, fmt.Errorf("migrating the ledger sink's schema: %w", err)
		}
		r.migrated = true
	}
	var (
		cluster string
		ours    state.ExportPosition
		width   int64
	)
	c.fsm.Read(func(s *state.State) { cluster, ours, width = s.ClusterID(), s.Exported(), s.BillingWindowSeconds() })
	if cluster == "" {
		return 0, nil // no leader has fixed the cluster's ID yet
	}
	// The position this exporter wrote last is the stored one unless
	// another writer moved it, which its next Write finds out: the
	// database is read again only after a failure.
	stored, known := r.stored, r.known
	r.known = false
	if !known {
		if err := r.settle(); err != nil {
			return 0, err
		}
		c.fsm.Read(func(s *state.State) { ours = s.Exported() })
		var err error
		if stored, err = r.sink.Position(ctx, cluster); err != nil {
			return 0, fmt.Errorf("reading the ledger sink's position: %w", err)
		}
	}
	theirs := positionFromSink(stored)
	switch {
	case theirs.After(ours) && r.pending == nil:
		if err := r.commit(theirs); err != nil {
			return 0, err
		}
		c.log.Info("ledger export resumed from the sink's position", "lines", theirs.Lines, "batches", theirs.Batches)
		r.stored, r.known = stored, true
		return -1, nil
	case ours.After(theirs) || !theirs.After(ours) && ours.Set && ours.Lines != theirs.Lines:
		return 0, fmt.Errorf("%w: the sink holds %d lines up to %v, the cluster committed %d up to %v",
			ErrSinkBehind, theirs.Lines, theirs.Last, ours.Lines, ours.Last)
	}
	var page []state.Line
	c.fsm.Read(func(s *state.State) { page = s.ExportPageAfter(theirs, c.cfg.ExportBatch) })
	if len(page) == 0 {
		if err := r.settle(); err != nil {
			return 0, err
		}
		r.stored, r.known = stored, true
		return 0, nil
	}
	lines := make([]ledgersink.Line, len(page))
	for i, l := range page {
		lines[i] = ledgersink.Line{
			Key:           ledgersink.Key{Window: l.Key.Window, Tenant: l.Key.Tenant, Rule: l.Key.Rule, Region: l.Key.Region},
			WindowSeconds: width, Admitted: l.Admitted, Denied: l.Denied, Granted: l.Granted,
		}
	}
	start := time.Now()
	next, err := r.sink.Write(ctx, cluster, stored, lines)
	if err != nil {
		return 0, fmt.Errorf("writing %d ledger lines to the sink: %w", len(lines), err)
	}
	c.metrics.exportSeconds.Observe(time.Since(start).Seconds())
	c.metrics.exportedLines.Add(float64(len(lines)))
	// The batch is in the sink: from here a crash loses nothing, the next
	// leader finds the sink ahead and proposes its position. The previous
	// batch's commit must land before this one's is proposed.
	if err := r.settle(); err != nil {
		return 0, err
	}
	pos := positionFromSink(next)
	done := make(chan error, 1)
	r.pending = done
	go func() { done <- r.commit(pos) }()
	r.stored, r.known = next, true
	return len(lines), nil
}

// settle waits for the commit in flight, if any, and returns its error.
func (r *exportRun) settle() error {
	if r.pending == nil {
		return nil
	}
	err := <-r.pending
	r.pending = nil
	return err
}

// commit proposes pos through Raft: members drop what it covers.
func (r *exportRun) commit(pos state.ExportPosition) error {
	if _, err := r.c.apply(r.c.ctx, state.CmdExported|state.Ignorable, &fsmpb.ExportedCommand{Position: pos.Proto()}, 10*time.Second); err != nil {
		return fmt.Errorf("committing the export position through Raft: %w", err)
	}
	return nil
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
}

// updateGauges sets the backlog's gauges and adds what retention dropped
// unexported.
func (r *exportRun) updateGauges() {
	c := r.c
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

func positionFromSink(p ledgersink.Position) state.ExportPosition {
	return state.ExportPosition{
		Set:   p.Set,
		Last:  state.LedgerKey{Window: p.Last.Window, Tenant: p.Last.Tenant, Rule: p.Last.Rule, Region: p.Last.Region},
		Lines: p.Lines, Batches: p.Batches,
	}
}
