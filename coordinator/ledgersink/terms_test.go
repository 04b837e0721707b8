package ledgersink_test

import (
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/pgserver/pgtest"
	"github.com/allot-io/allot/ledger"
)

// TestTermsInvoice: a database exported to before the terms and overage
// were recorded (schema version 2) keeps its rows through the
// migrations, with no terms and no overage; the lines exported after
// carry theirs; and one tenant's cycle under one rule is one query
// (QueryTenantCycle) that the partial index on tenant, rule and cycle
// serves, summing the cycle's lines of every cluster into the units its
// plan included and its overage, and giving the limit of its last
// window.
func TestTermsInvoice(t *testing.T) {
	dsn := pgtest.Database(t)
	s := open(t, dsn)
	ctx := ctxFor(t, time.Minute)
	if err := ledgersink.MigrateTo(ctx, s, 2); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, `INSERT INTO allot_usage (cluster_id, window_start, tenant, rule, region, window_seconds, admitted, denied)
VALUES ('eu-1', $1, 'acme', 'plan-quota', 'eu-west', 3600, 5, 0)`, time.Unix(hour(0), 0)); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	old, _, err := s.Query(ctx, "eu-1", ledgersink.Query{From: hour(0), To: hour(1)})
	if err != nil || len(old) != 1 || old[0].Admitted != 5 || old[0].Terms != (ledger.Terms{}) || old[0].Overage != 0 {
		t.Fatalf("the row exported before the migration: %+v, %v; want it whole, without terms or overage", old, err)
	}
	if n := scalar[int64](t, conn, "SELECT count(*) FROM allot_usage WHERE cycle_start IS NULL AND limit_units IS NULL AND overage IS NULL"); n != 1 {
		t.Fatalf("%d rows of NULL terms and overage after the migrations, want the one exported before", n)
	}

	// acme's cycle from the 17th at midnight in New York, past its limit
	// of 100,000 in its second window, then upgraded to 400,000; the cycle
	// before; another rule; another tenant; a region's cluster of its own.
	cycle := time.Date(2025, 12, 17, 5, 0, 0, 0, time.UTC)
	before := cycle.AddDate(0, -1, 0)
	terms := func(start time.Time, limit int64) ledger.Terms {
		return ledger.Terms{CycleStart: start.Unix(), Limit: limit}
	}
	with := func(l ledger.Line, tm ledger.Terms) ledger.Line { l.Terms = tm; return l }
	over := func(l ledger.Line, o uint64) ledger.Line { l.Overage = o; return l }
	eu := []ledger.Line{
		with(line(hour(1), "acme", "per-user", "eu-west", 7), ledger.Terms{}),
		with(line(hour(1), "acme", "plan-quota", "eu-west", 40), terms(cycle, 100000)),
		with(line(hour(1), "globex", "plan-quota", "eu-west", 900), terms(cycle, 100000)),
		over(with(line(hour(2), "acme", "plan-quota", "eu-west", 60), terms(cycle, 400000)), 20),
	}
	if _, err := s.Write(ctx, "eu-1", ledger.Position{}, eu); err != nil {
		t.Fatal(err)
	}
	us := []ledger.Line{
		with(line(hour(0)-3600, "acme", "plan-quota", "us-east", 1000), terms(before, 100000)),
		with(line(hour(1), "acme", "plan-quota", "us-east", 3), terms(cycle, 100000)),
		over(with(line(hour(2), "acme", "plan-quota", "us-east", 2), terms(cycle, 400000)), 2),
	}
	if _, err := s.Write(ctx, "us-1", ledger.Position{}, us); err != nil {
		t.Fatal(err)
	}

	var (
		tenant, rule                        string
		start                               time.Time
		admitted, included, overage, denied int64
		limit                               *int64
	)
	if err := conn.QueryRow(ctx, ledgersink.QueryTenantCycle, "acme", "plan-quota", "2025-12-17 00:00:00 America/New_York").
		Scan(&tenant, &rule, &start, &admitted, &included, &overage, &denied, &limit); err != nil {
		t.Fatal(err)
	}
	if tenant != "acme" || rule != "plan-quota" || !start.Equal(cycle) || admitted != 105 || included != 83 || overage != 22 || denied != 10 ||
		limit == nil || *limit != 400000 {
		t.Errorf("acme's invoice: %s %s from %v, admitted %d (%d included, %d overage) denied %d limit %v; want 105 (83 and 22) and 10 from %v against 400000",
			tenant, rule, start, admitted, included, overage, denied, limit, cycle)
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	// The table is too small for the planner to choose an index on its
	// own; forbidding the sequential scan asks which index serves.
	if _, err := tx.Exec(ctx, "SET LOCAL enable_seqscan = off"); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, "EXPLAIN "+ledgersink.QueryTenantCycle, "acme", "plan-quota", cycle)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var l string
		if err := rows.Scan(&l); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, l)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if p := strings.Join(plan, "\n"); !strings.Contains(p, "allot_usage_tenant_rule_cycle") {
		t.Errorf("the invoice is not served by allot_usage_tenant_rule_cycle:\n%s", p)
	}
}
