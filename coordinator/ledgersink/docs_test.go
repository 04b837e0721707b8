package ledgersink_test

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/ledgersink"
	"github.com/allot-io/allot/internal/pgserver"
	"github.com/allot-io/allot/ledger"
)

// billingDoc is the doc that prints the billing queries for psql.
const billingDoc = "../../docs/billing.md"

// docQueries is the ```sql block of the doc's "Billing queries": psql's
// \set lines, then the queries.
func docQueries(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(billingDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n### Billing queries\n")
	if !ok {
		t.Fatalf("%s has no section \"Billing queries\"", billingDoc)
	}
	_, rest, ok = strings.Cut(rest, "\n```sql\n")
	if !ok {
		t.Fatalf("%s: \"Billing queries\" has no ```sql block", billingDoc)
	}
	block, _, ok := strings.Cut(rest, "\n```\n")
	if !ok {
		t.Fatalf("%s: the ```sql block of \"Billing queries\" is never closed", billingDoc)
	}
	return block + "\n"
}

var (
	psqlSet   = regexp.MustCompile(`(?m)^\\set (\w+) '([^']*)'$`)
	psqlVar   = regexp.MustCompile(`:'(\w+)'`)
	sqlSpaces = regexp.MustCompile(`\s+`)
)

// TestBillingDocQueries runs the doc's billing queries as a reader pastes
// them into psql, against a real PostgreSQL holding a ledger that the
// doc's \set values select from, and checks that each prints what
// queries.go's constant of the same place prints with those values as its
// parameters: the doc is the constants, in a form psql runs.
func TestBillingDocQueries(t *testing.T) {
	block := docQueries(t)
	vars := map[string]string{}
	for _, m := range psqlSet.FindAllStringSubmatch(block, -1) {
		vars[m[1]] = m[2]
	}
	var queries []string
	for q := range strings.SplitSeq(psqlSet.ReplaceAllString(block, ""), ";") {
		var sql []string
		for l := range strings.SplitSeq(q, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
				sql = append(sql, l)
			}
		}
		if len(sql) > 0 {
			queries = append(queries, strings.Join(sql, "\n"))
		}
	}
	constants := []string{ledgersink.QueryTenantMonth, ledgersink.QueryAllTenantsDay, ledgersink.QueryRegionsMerged, ledgersink.QueryTenantCycle}
	if len(queries) != len(constants) {
		t.Fatalf("%s shows %d billing queries; queries.go has %d:\n%s", billingDoc, len(queries), len(constants), block)
	}

	// Each doc query is its constant with psql's variables where the
	// constant has $1, $2…, in the order they first appear.
	params := make([][]string, len(queries))
	for i, q := range queries {
		var names []string
		generic := psqlVar.ReplaceAllStringFunc(q, func(v string) string {
			name := psqlVar.FindStringSubmatch(v)[1]
			if _, ok := vars[name]; !ok {
				t.Errorf("query %d uses :'%s', which the block does not \\set", i+1, name)
			}
			for j, n := range names {
				if n == name {
					return fmt.Sprintf("$%d", j+1)
				}
			}
			names = append(names, name)
			return fmt.Sprintf("$%d", len(names))
		})
		if norm := func(s string) string { return sqlSpaces.ReplaceAllString(s, " ") }; norm(generic) != norm(constants[i]) {
			t.Errorf("the doc's query %d, with $N for its variables, is\n%s\nqueries.go's is\n%s", i+1, generic, constants[i])
		}
		params[i] = names
	}
	if t.Failed() {
		return
	}

	s, dsn := migrated(t)
	psql, err := pgserver.Program("psql")
	if err != nil {
		t.Fatal(err)
	}
	run := func(what, script string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// -X: no ~/.psqlrc; ON_ERROR_STOP: an error is a failed run, not
		// a line among the others.
		cmd := osexec.CommandContext(ctx, psql, "-X", "-q", "--csv", "-v", "ON_ERROR_STOP=1", "-d", dsn)
		cmd.Stdin = strings.NewReader(script)
		cmd.Env = append(os.Environ(), "PGTZ=UTC")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s in psql: %v\n%s\nthe script was:\n%s", what, err, out, script)
		}
		return string(out)
	}
	// As pasted into a new database: the queries run, and select nothing.
	run("the doc's block", block)

	// A ledger the values select from, and lines they leave out: another
	// tenant, the month before, the day before, another rule, the cycle
	// before. The invoice's rule is a monthly plan on the tenant's own
	// cycle, from its anchor in its zone as \set cycle_start writes it; its
	// limit rises in the cycle's last window.
	month, err := time.Parse("2006-01-02 15:04:05-07", vars["month_from"])
	if err != nil {
		t.Fatalf("month_from: %v", err)
	}
	tenant, invoiced := vars["tenant"], vars["rule"]
	cycle := anchoredCycle(t, vars["cycle_start"])
	for c, cluster := range []string{"eu-1", "us-1"} {
		var lines []ledger.Line
		for _, w := range []time.Time{month.AddDate(0, 0, -1), month, month.AddDate(0, 0, 10), month.AddDate(0, 1, -1), month.AddDate(0, 1, -1).Add(time.Hour)} {
			for _, tn := range []string{tenant, "globex"} {
				for _, rule := range []string{"api", invoiced} {
					l := line(w.Unix(), tn, rule, []string{"eu-west", "us-east"}[c], uint64(len(lines)+10*c+1))
					if len(lines)%2 == 0 {
						l.Granted = ptr(float64(len(lines)) * 1.5)
					}
					if rule == invoiced {
						l.Terms = ledger.Terms{CycleStart: cycle.Start(w).Unix(), Limit: 100000}
						if w.Equal(month.AddDate(0, 1, -1).Add(time.Hour)) {
							l.Limit, l.Overage = 250000, l.Admitted/2
						}
					}
					lines = append(lines, l)
				}
			}
		}
		slices.SortFunc(lines, func(a, b ledger.Line) int { return ledger.CompareKeys(a.Key, b.Key) })
		export(t, s, cluster, lines, 7)
	}

	got := run("the doc's block", block)

	// The constants, prepared and executed with the doc's values.
	var script strings.Builder
	for i, c := range constants {
		args := make([]string, len(params[i]))
		for j, name := range params[i] {
			args[j] = "'" + vars[name] + "'"
		}
		fmt.Fprintf(&script, "PREPARE q%d AS %s;\nEXECUTE q%d(%s);\n", i, c, i, strings.Join(args, ", "))
	}
	want := run("queries.go's constants", script.String())
	if got != want {
		t.Errorf("the doc's block printed\n%s\nqueries.go's constants print\n%s", got, want)
	}
	// The headers and the rows: the values must select some of each.
	if rows := strings.Count(got, "\n") - len(constants); rows < 3*len(constants) {
		t.Errorf("the doc's values select %d rows of the test's ledger in all, want several for each query:\n%s", rows, got)
	}
	// The invoice is the cycle's lines: two windows in each cluster, some
	// overage, and the limit of the last.
	if !regexp.MustCompile(`(?m)^` + tenant + `,` + invoiced + `,[^,]+,\d+,\d+,[1-9]\d*,\d+,250000$`).MatchString(got) {
		t.Errorf("the doc's invoice selects no cycle of %s under %s, against the limit of its last window:\n%s", tenant, invoiced, got)
	}
}

// anchoredCycle is the monthly calendar whose cycle starts at start, a
// psql timestamp with a zone's name ('2026-11-17 00:00:00
// America/New_York'): anchored on its day, at midnight in its zone.
func anchoredCycle(t *testing.T, start string) algo.Calendar {
	t.Helper()
	at, zone, ok := strings.Cut(start, " America/")
	if !ok {
		t.Fatalf("cycle_start %q: want a time in an America/ zone, as the doc's example", start)
	}
	loc, err := time.LoadLocation("America/" + zone)
	if err != nil {
		t.Fatal(err)
	}
	when, err := time.ParseInLocation(time.DateTime, at, loc)
	if err != nil || when.Hour() != 0 || when.Minute() != 0 {
		t.Fatalf("cycle_start %q: %v; want a midnight", start, err)
	}
	return algo.Calendar{Unit: algo.Month, Anchor: when.Day(), Location: loc}
}
