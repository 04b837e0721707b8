package ledgersink

import (
	"context"
	"fmt"
	"time"
)

// Notice is a threshold notice as the sink stores it (allot_notices).
type Notice struct {
	Key, Tenant, Rule    string
	CycleStart, CycleEnd time.Time
	Threshold            float64
	Limit                int64
	Used                 uint64
	CrossedAt            time.Time
}

const insertNotices = `INSERT INTO allot_notices
    (cluster_id, key, tenant, rule, cycle_start, cycle_end, threshold, limit_units, used, crossed_at)
SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::timestamptz[], $6::timestamptz[],
    $7::double precision[], $8::bigint[], $9::bigint[], $10::timestamptz[])
ON CONFLICT (cluster_id, key) DO NOTHING`

// WriteNotices stores cluster's notices, in one statement: a notice
// stored already (the same key, written by a leader that lost leadership
// before it could record so) is left as it is, so writing one again is
// harmless.
func (s *Sink) WriteNotices(ctx context.Context, cluster string, ns []Notice) error {
	if len(ns) == 0 {
		return nil
	}
	var (
		keys, tenants, rules []string
		starts, ends, at     []time.Time
		thresholds           []float64
		limits, used         []int64
	)
	for _, n := range ns {
		keys, tenants, rules = append(keys, storeName(n.Key)), append(tenants, storeName(n.Tenant)), append(rules, storeName(n.Rule))
		starts, ends, at = append(starts, n.CycleStart), append(ends, n.CycleEnd), append(at, n.CrossedAt)
		thresholds, limits, used = append(thresholds, n.Threshold), append(limits, n.Limit), append(used, clamp(n.Used))
	}
	if _, err := s.pool.Exec(ctx, insertNotices, cluster, keys, tenants, rules, starts, ends, thresholds, limits, used, at); err != nil {
		return fmt.Errorf("ledgersink: storing %d notices: %w", len(ns), err)
	}
	return nil
}
