package ledgersink

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/allot-io/allot/ledger"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

const (
	selectPosition = `SELECT window_start, tenant, rule, region, lines, batches
FROM allot_export_position WHERE cluster_id = $1`
	insertPosition = `INSERT INTO allot_export_position (cluster_id) VALUES ($1)
ON CONFLICT (cluster_id) DO NOTHING`
	updatePosition = `UPDATE allot_export_position
SET window_start = $2, tenant = $3, rule = $4, region = $5, lines = $6, batches = $7, updated_at = now()
WHERE cluster_id = $1`

	// createStage is the staging table COPY fills, gone at commit.
	createStage = `CREATE TEMP TABLE allot_usage_stage (
    window_start   timestamptz NOT NULL,
    tenant         text COLLATE "C" NOT NULL,
    rule           text COLLATE "C" NOT NULL,
    region         text COLLATE "C" NOT NULL,
    window_seconds integer NOT NULL,
    admitted       bigint NOT NULL,
    denied         bigint NOT NULL,
    granted        double precision,
    cycle_start    timestamptz,
    limit_units    bigint,
    overage        bigint NOT NULL
) ON COMMIT DROP`

	// onConflict adds a key exported again to what is stored: counts
	// saturate at the bigint's maximum (overage, part of admitted, at
	// admitted), and granted is the sum of the two with NULL as absent
	// (NULL only when both are). The terms are the later line's, as the
	// ledger keeps the later usage's, unless it has none.
	onConflict = `
ON CONFLICT (cluster_id, window_start, tenant, rule, region) DO UPDATE SET
    window_seconds = EXCLUDED.window_seconds,
    admitted = CASE WHEN allot_usage.admitted > 9223372036854775807 - EXCLUDED.admitted
        THEN 9223372036854775807 ELSE allot_usage.admitted + EXCLUDED.admitted END,
    denied = CASE WHEN allot_usage.denied > 9223372036854775807 - EXCLUDED.denied
        THEN 9223372036854775807 ELSE allot_usage.denied + EXCLUDED.denied END,
    granted = CASE WHEN allot_usage.granted IS NULL AND EXCLUDED.granted IS NULL THEN NULL
        ELSE COALESCE(allot_usage.granted, 0) + COALESCE(EXCLUDED.granted, 0) END,
    cycle_start = COALESCE(EXCLUDED.cycle_start, allot_usage.cycle_start),
    limit_units = COALESCE(EXCLUDED.limit_units, allot_usage.limit_units),
    overage = LEAST(CASE WHEN COALESCE(allot_usage.overage, 0) > 9223372036854775807 - EXCLUDED.overage
        THEN 9223372036854775807 ELSE COALESCE(allot_usage.overage, 0) + EXCLUDED.overage END,
        CASE WHEN allot_usage.admitted > 9223372036854775807 - EXCLUDED.admitted
        THEN 9223372036854775807 ELSE allot_usage.admitted + EXCLUDED.admitted END),
    exported_at = now()`

	upsertFromStage = `INSERT INTO allot_usage
    (cluster_id, window_start, tenant, rule, region, window_seconds, admitted, denied, granted, cycle_start, limit_units, overage)
SELECT $1, window_start, tenant, rule, region, window_seconds, admitted, denied, granted, cycle_start, limit_units, overage
FROM allot_usage_stage` + onConflict

	upsertFromArrays = `INSERT INTO allot_usage
    (cluster_id, window_start, tenant, rule, region, window_seconds, admitted, denied, granted, cycle_start, limit_units, overage)
SELECT $1, * FROM unnest($2::timestamptz[], $3::text[], $4::text[], $5::text[],
    $6::integer[], $7::bigint[], $8::bigint[], $9::double precision[], $10::timestamptz[], $11::bigint[], $12::bigint[])` + onConflict
)

// stageColumns are allot_usage_stage's columns in COPY order.
var stageColumns = []string{"window_start", "tenant", "rule", "region", "window_seconds", "admitted", "denied", "granted", "cycle_start", "limit_units", "overage"}

// errNoPosition is a cluster with no position row.
var errNoPosition = errors.New("no position row")

// Write exports lines of cluster, read after position from, in one
// transaction: it locks the cluster's position row, refuses the batch
// with a *PositionError if the row is not from (another writer went
// first; nothing is written), adds the lines to allot_usage (COPY into
// a staging table, then one INSERT … ON CONFLICT DO UPDATE adding to a
// key already there), moves the position to the last line and commits.
// It returns the new position.
//
// A line's Admitted, Denied and Overage are uint64 in the ledger and
// bigint in PostgreSQL: a count above math.MaxInt64 is stored as
// math.MaxInt64, and so is a sum of two exports of one key that would
// pass it (overage at most admitted). Its Final is not stored: every line
// a sink holds is final.
//
// lines must be non-empty, in strictly increasing ledger order and all
// after from.Last; otherwise the error wraps ErrBadBatch and nothing is
// sent. On any other error the batch may or may not have been committed
// (a commit whose answer was lost): read Position before writing again.
// A retry with the old from cannot count twice; it fails with
// ErrPositionMoved.
func (s *Sink) Write(ctx context.Context, cluster string, from ledger.Position, lines []ledger.Line) (ledger.Position, error) {
	if err := validate(cluster, from, lines); err != nil {
		return ledger.Position{}, err
	}
	return s.writeBatch(ctx, cluster, from, lines, nil, nil)
}

// writeBatch is one batch's transaction. before, when not nil, is the
// batch of a Pipeline sent just before this one, still in flight when
// this one was sent; f is this one's, told when it holds the position's
// lock. Without a batch before it, the transaction locks the position
// first, so that a writer who lost the race copies nothing. Behind one,
// it copies its lines while the batch before commits, and asks for the
// lock only once that batch holds it: PostgreSQL then grants the lock,
// and the commits happen, in batch order. The position's compare-and-set
// is the same either way, so that order is for speed only: a batch that
// got ahead of the one before it would find the position not yet moved
// and write nothing.
func (s *Sink) writeBatch(ctx context.Context, cluster string, from ledger.Position, lines []ledger.Line, before, f *flight) (ledger.Position, error) {
	var next ledger.Position
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		f.hasBegun()
		copied := false
		if before != nil && !before.ended() {
			if err := s.write(ctx, tx, cluster, lines); err != nil {
				return err
			}
			copied = true
			if err := before.waitLocked(ctx); err != nil {
				return err
			}
		}
		stored, err := lock(ctx, tx, cluster)
		if err != nil {
			return err
		}
		f.holdsLock()
		if !stored.Same(from) {
			return &PositionError{Stored: stored, Expected: from}
		}
		if !copied {
			if err := s.write(ctx, tx, cluster, lines); err != nil {
				return err
			}
		}
		next = stored.Advance(lines)
		last := next.Last
		_, err = tx.Exec(ctx, updatePosition, cluster, time.Unix(last.Window, 0), storeName(last.Tenant), storeName(last.Rule), storeName(last.Region),
			clamp(next.Lines), clamp(next.Batches))
		if err != nil {
			return fmt.Errorf("moving the position: %w", err)
		}
		return nil
	})
	if err != nil {
		var pe *PositionError
		if errors.As(err, &pe) {
			return ledger.Position{}, pe
		}
		return ledger.Position{}, fmt.Errorf("ledgersink: writing %d lines of cluster %q: %w", len(lines), cluster, err)
	}
	return next, nil
}

// lock reads cluster's position FOR UPDATE, inserting a zero row first
// if it has none, so two writers of a new cluster queue on the row too.
func lock(ctx context.Context, tx pgx.Tx, cluster string) (ledger.Position, error) {
	b := &pgx.Batch{}
	b.Queue(insertPosition, cluster)
	b.Queue(selectPosition+" FOR UPDATE", cluster)
	br := tx.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return ledger.Position{}, fmt.Errorf("locking the position: %w", err)
	}
	p, err := scanPosition(br.QueryRow())
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return ledger.Position{}, fmt.Errorf("locking the position: %w", err)
	}
	return p, nil
}

func scanPosition(row pgx.Row) (ledger.Position, error) {
	var (
		window               *time.Time
		tenant, rule, region *string
		lines, batches       int64
	)
	if err := row.Scan(&window, &tenant, &rule, &region, &lines, &batches); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return ledger.Position{}, errNoPosition
		}
		return ledger.Position{}, err
	}
	p := ledger.Position{Lines: uint64(lines), Batches: uint64(batches)}
	if window != nil && tenant != nil && rule != nil && region != nil {
		p.Set = true
		p.Last = ledger.Key{Window: window.Unix(), Tenant: loadName(*tenant), Rule: loadName(*rule), Region: loadName(*region)}
	}
	return p, nil
}

// upsertFunc adds lines to allot_usage within tx.
type upsertFunc func(ctx context.Context, tx pgx.Tx, cluster string, lines []ledger.Line) error

// copyUpsert streams lines into a staging table with COPY, then adds
// them to allot_usage with one INSERT … SELECT … ON CONFLICT.
func copyUpsert(ctx context.Context, tx pgx.Tx, cluster string, lines []ledger.Line) error {
	if _, err := tx.Exec(ctx, createStage); err != nil {
		return fmt.Errorf("creating the staging table: %w", err)
	}
	if err := copyRows(ctx, tx, copyStage, encodeCopy(cluster, false, lines)); err != nil {
		return fmt.Errorf("copying into the staging table: %w", err)
	}
	if _, err := tx.Exec(ctx, upsertFromStage, cluster); err != nil {
		return fmt.Errorf("adding to allot_usage: %w", err)
	}
	return nil
}

// copyDirect streams lines with COPY straight into allot_usage, under a
// savepoint: a key is almost never exported twice (a window is final
// when exported, and later usage goes into a later window), so the batch
// goes in as new rows without the staging table or ON CONFLICT's
// speculative insertion. If a key is already there the COPY fails on the
// primary key, the savepoint undoes it, and the batch goes through
// copyUpsert, which adds to what is stored.
func copyDirect(ctx context.Context, tx pgx.Tx, cluster string, lines []ledger.Line) error {
	if _, err := tx.Exec(ctx, "SAVEPOINT allot_copy"); err != nil {
		return fmt.Errorf("a savepoint before the copy: %w", err)
	}
	err := copyRows(ctx, tx, copyUsage, encodeCopy(cluster, true, lines))
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == "23505": // unique_violation
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT allot_copy"); err != nil {
			return fmt.Errorf("undoing the copy of a key already exported: %w", err)
		}
		return copyUpsert(ctx, tx, cluster, lines)
	default:
		return fmt.Errorf("copying into allot_usage: %w", err)
	}
}

// usageColumns are allot_usage's columns copyDirect fills.
var usageColumns = []string{"cluster_id", "window_start", "tenant", "rule", "region", "window_seconds", "admitted", "denied", "granted", "cycle_start", "limit_units", "overage"}

// unnestUpsert sends lines as one array per column in a single
// INSERT … SELECT FROM unnest(…) ON CONFLICT: one statement, no staging
// table. BenchmarkWrite compares it with copyUpsert.
func unnestUpsert(ctx context.Context, tx pgx.Tx, cluster string, lines []ledger.Line) error {
	n := len(lines)
	var (
		windows  = make([]time.Time, n)
		tenants  = make([]string, n)
		rules    = make([]string, n)
		regions  = make([]string, n)
		seconds  = make([]int32, n)
		admitted = make([]int64, n)
		denied   = make([]int64, n)
		granted  = make([]*float64, n)
		cycles   = make([]*time.Time, n)
		limits   = make([]*int64, n)
		overage  = make([]int64, n)
	)
	for i := range lines {
		l := &lines[i]
		windows[i], tenants[i], rules[i], regions[i] = time.Unix(l.Window, 0), storeName(l.Tenant), storeName(l.Rule), storeName(l.Region)
		seconds[i], admitted[i], denied[i], granted[i] = int32(l.WindowSeconds), clamp(l.Admitted), clamp(l.Denied), l.Granted
		if start, ok := l.Cycle(); ok {
			cycles[i] = &start
		}
		if l.Limit != 0 {
			limits[i] = &l.Limit
		}
		overage[i] = min(clamp(l.Overage), admitted[i])
	}
	if _, err := tx.Exec(ctx, upsertFromArrays, cluster, windows, tenants, rules, regions, seconds, admitted, denied, granted, cycles, limits, overage); err != nil {
		return fmt.Errorf("adding to allot_usage: %w", err)
	}
	return nil
}

// The window starts PostgreSQL's timestamptz and Go's time agree on:
// years 1 to 9999.
const (
	minWindow = -62135596800
	maxWindow = 253402300799
)

// validate checks a batch before anything is sent.
func validate(cluster string, from ledger.Position, lines []ledger.Line) error {
	if err := storable("cluster ID", cluster); err != nil {
		return err
	}
	if cluster == "" {
		return fmt.Errorf("%w: an empty cluster ID", ErrBadBatch)
	}
	if len(lines) == 0 {
		return fmt.Errorf("%w: no lines", ErrBadBatch)
	}
	for i := range lines {
		l := &lines[i]
		switch {
		case l.Window < minWindow || l.Window > maxWindow:
			return fmt.Errorf("%w: line %d (%v): window start %d is outside years 1 to 9999", ErrBadBatch, i, l.Key, l.Window)
		case l.WindowSeconds <= 0 || l.WindowSeconds > math.MaxInt32:
			return fmt.Errorf("%w: line %d (%v): window of %d seconds", ErrBadBatch, i, l.Key, l.WindowSeconds)
		}
		for _, f := range []struct{ name, v string }{{"tenant", l.Tenant}, {"rule", l.Rule}, {"region", l.Region}} {
			// A NUL byte is stored escaped (names.go); invalid UTF-8 cannot
			// be, and no protobuf string holds it.
			if !utf8.ValidString(f.v) {
				return fmt.Errorf("%w: line %d: %s %q is not UTF-8", ErrBadBatch, i, f.name, f.v)
			}
		}
		if i == 0 {
			if from.Set && ledger.CompareKeys(from.Last, l.Key) >= 0 {
				return fmt.Errorf("%w: line 0 (%v) is not after the position (%v)", ErrBadBatch, l.Key, from.Last)
			}
			continue
		}
		if ledger.CompareKeys(lines[i-1].Key, l.Key) >= 0 {
			return fmt.Errorf("%w: line %d (%v) is not after line %d (%v): lines must be in strictly increasing ledger order",
				ErrBadBatch, i, l.Key, i-1, lines[i-1].Key)
		}
	}
	return nil
}

// storable refuses text PostgreSQL cannot hold: invalid UTF-8 (the
// database's encoding) and NUL bytes.
func storable(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%w: %s %q is not UTF-8", ErrBadBatch, what, s)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return fmt.Errorf("%w: %s %q holds a NUL byte", ErrBadBatch, what, s)
	}
	return nil
}
