package ledgersink

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/ledger"
)

// DefaultQueryLimit is Query's page size when Query.Limit is not positive.
const DefaultQueryLimit = 1000

// Query picks lines of one cluster for Sink.Query.
type Query struct {
	// From and To bound the window start, Unix seconds: [From, To).
	// To 0 means no upper bound.
	From, To int64
	// Tenant, Rule and Region, when not empty, must match exactly.
	Tenant, Rule, Region string
	// After, when set, starts the page after this key: the last key of
	// the page before.
	After *ledger.Key
	// Limit is the most lines returned; DefaultQueryLimit when ≤ 0.
	Limit int
}

// Query returns cluster's lines matching q in ledger order, and whether
// more follow the last one returned (page on with After set to its key).
// It reads in the primary key's order, so a page costs its own size
// whatever its depth.
func (s *Sink) Query(ctx context.Context, cluster string, q Query) (lines []ledger.Line, more bool, err error) {
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultQueryLimit
	}
	var sql strings.Builder
	args := []any{cluster}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	sql.WriteString(`SELECT window_start, tenant, rule, region, window_seconds, admitted, denied, granted, cycle_start, limit_units, overage
FROM allot_usage WHERE cluster_id = $1`)
	fmt.Fprintf(&sql, " AND window_start >= %s", arg(time.Unix(q.From, 0)))
	if q.To != 0 {
		fmt.Fprintf(&sql, " AND window_start < %s", arg(time.Unix(q.To, 0)))
	}
	for _, f := range []struct{ col, v string }{{"tenant", q.Tenant}, {"rule", q.Rule}, {"region", q.Region}} {
		if f.v != "" {
			fmt.Fprintf(&sql, " AND %s = %s", f.col, arg(storeName(f.v)))
		}
	}
	if a := q.After; a != nil {
		fmt.Fprintf(&sql, " AND (window_start, tenant, rule, region) > (%s, %s, %s, %s)",
			arg(time.Unix(a.Window, 0)), arg(storeName(a.Tenant)), arg(storeName(a.Rule)), arg(storeName(a.Region)))
	}
	fmt.Fprintf(&sql, "\nORDER BY window_start, tenant, rule, region LIMIT %s", arg(limit+1))

	rows, err := s.pool.Query(ctx, sql.String(), args...)
	if err != nil {
		return nil, false, fmt.Errorf("ledgersink: querying cluster %q: %w", cluster, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			l                = ledger.Line{Final: true}
			window           time.Time
			seconds          int32
			admitted, denied int64
			cycle            *time.Time
			limit, overage   *int64
		)
		if err := rows.Scan(&window, &l.Tenant, &l.Rule, &l.Region, &seconds, &admitted, &denied, &l.Granted, &cycle, &limit, &overage); err != nil {
			return nil, false, fmt.Errorf("ledgersink: querying cluster %q: %w", cluster, err)
		}
		l.Tenant, l.Rule, l.Region = loadName(l.Tenant), loadName(l.Rule), loadName(l.Region)
		l.Window, l.WindowSeconds = window.Unix(), int64(seconds)
		l.Admitted, l.Denied = uint64(admitted), uint64(denied)
		if cycle != nil {
			l.CycleStart = cycle.Unix()
		}
		if limit != nil {
			l.Limit = *limit
		}
		if overage != nil { // NULL: exported before overage was counted
			l.Overage = uint64(*overage)
		}
		lines = append(lines, l)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("ledgersink: querying cluster %q: %w", cluster, err)
	}
	if len(lines) > limit {
		return lines[:limit], true, nil
	}
	return lines, false, nil
}
