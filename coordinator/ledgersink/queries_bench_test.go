package ledgersink_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/pgserver"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
)

// The big ledger BenchmarkQueries fills: 3 clusters (one region each),
// 1,000 tenants, 5 rules, hourly windows; 15,000 lines a window, so 20
// million lines are 1,334 windows, about 56 days.
const (
	bigClusters = 3
	bigTenants  = 1000
	bigRules    = 5
	bigLines    = 20_000_000
	bigPerHour  = bigClusters * bigTenants * bigRules
	bigChunk    = 1_000_000
)

// fillBig writes lines [$1, $2) of the big ledger in export order
// (window, cluster, tenant, rule), straight from generate_series. rule-0
// is a tenant's plan: its lines carry 30-day cycles from the first
// window, and a limit.
const fillBig = `INSERT INTO allot_usage
    (cluster_id, window_start, tenant, rule, region, window_seconds, admitted, denied, granted, cycle_start, limit_units)
SELECT 'cluster-' || region, to_timestamp($3::bigint + 3600 * w), 'tenant-' || lpad(t::text, 4, '0'),
    'rule-' || r, region, 3600, a, a % 97, CASE WHEN r = 0 THEN 1000.0 END,
    CASE WHEN r = 0 THEN to_timestamp($3::bigint + 3600 * (w - w % 720)) END, CASE WHEN r = 0 THEN 100000 END
FROM generate_series($1::bigint, $2::bigint - 1) AS i,
    LATERAL (SELECT i / 15000 AS w, (i / 5000) % 3 AS c, (i / 5) % 1000 AS t, i % 5 AS r,
        (hashint8(i) & 65535)::bigint AS a) AS k,
    LATERAL (SELECT (ARRAY['ap-south', 'eu-west', 'us-east'])[c + 1] AS region) AS g`

// BenchmarkQueries times the billing queries (queries.go) on 20 million
// lines. Filling takes minutes, so it runs only when asked (-v shows the
// fill's time, the table's size and each query's plan):
//
//	ALLOT_BENCH_BIG=1 go test -v -run '^$' -bench Queries -timeout 60m ./coordinator/ledgersink
//
// The server is one of its own, with fsync off to fill faster (reads do
// not sync); its other settings are PostgreSQL's defaults.
func BenchmarkQueries(b *testing.B) {
	if os.Getenv("ALLOT_BENCH_BIG") != "1" {
		b.Skip("fills 20 million lines: set ALLOT_BENCH_BIG=1 to run it")
	}
	if bigPerHour != 15000 {
		b.Fatal("fillBig's arithmetic assumes 15,000 lines a window")
	}
	if err := pgserver.Available(); err != nil {
		b.Skip(err)
	}
	srv, err := pgserver.Start(ctxFor(b, 2*time.Minute), pgserver.Options{
		Fast:     true,
		Settings: map[string]string{"max_wal_size": "8GB", "checkpoint_timeout": "30min"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	dsn := pgtest.CreateDatabase(b, srv)
	s := open(b, dsn)
	if err := s.Migrate(ctxFor(b, time.Minute)); err != nil {
		b.Fatal(err)
	}
	conn := connect(b, dsn)
	start := time.Unix(hour(0), 0)
	began := time.Now()
	for from := 0; from < bigLines; from += bigChunk {
		if _, err := conn.Exec(ctxFor(b, 10*time.Minute), fillBig, from, from+bigChunk, start.Unix()); err != nil {
			b.Fatal(err)
		}
	}
	filled := time.Since(began)
	if _, err := conn.Exec(ctxFor(b, 30*time.Minute), "VACUUM (ANALYZE) allot_usage"); err != nil {
		b.Fatal(err)
	}
	var size string
	if err := conn.QueryRow(ctxFor(b, time.Minute), "SELECT pg_size_pretty(pg_total_relation_size('allot_usage'))").Scan(&size); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d lines filled in %v, vacuumed in %v more; allot_usage with its indexes: %s",
		bigLines, filled.Round(time.Second), (time.Since(began) - filled).Round(time.Second), size)

	month, day := 30*24*time.Hour, 24*time.Hour
	queries := []struct {
		name string
		sql  string
		args func(i int) []any
	}{
		{"tenant_month", ledgersink.QueryTenantMonth, func(i int) []any {
			from := start.Add(time.Duration(i%20) * day)
			return []any{fmt.Sprintf("tenant-%04d", (i*37)%bigTenants), from, from.Add(month)}
		}},
		{"all_tenants_day", ledgersink.QueryAllTenantsDay, func(i int) []any {
			from := start.Add(time.Duration(i%50) * day)
			return []any{from, from.Add(day)}
		}},
		{"regions_merged", ledgersink.QueryRegionsMerged, func(i int) []any {
			from := start.Add(time.Duration(i%20) * day)
			return []any{fmt.Sprintf("tenant-%04d", (i*37)%bigTenants), from, from.Add(month)}
		}},
		{"tenant_cycle", ledgersink.QueryTenantCycle, func(i int) []any {
			return []any{fmt.Sprintf("tenant-%04d", (i*37)%bigTenants), "rule-0", start.Add(time.Duration(i%2) * month)}
		}},
	}
	for _, q := range queries {
		b.Run(q.name, func(b *testing.B) {
			b.Logf("%s", explain(b, conn, q.sql, q.args(0)))
			b.ReportAllocs()
			rows := 0
			for i := 0; b.Loop(); i++ {
				rows = run(b, conn, q.sql, q.args(i+1))
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/query")
			b.ReportMetric(float64(rows), "rows")
		})
	}
}

// run runs a query to its last row and counts them.
func run(b *testing.B, conn *pgx.Conn, sql string, args []any) int {
	rows, err := conn.Query(ctxFor(b, time.Minute), sql, args...)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return n
}

// explain is the query's plan as run, for the log.
func explain(b *testing.B, conn *pgx.Conn, sql string, args []any) string {
	rows, err := conn.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
	if err != nil {
		b.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			b.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return strings.Join(plan, "\n")
}
