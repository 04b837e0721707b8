package ledgersink_test

import (
	"context"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/pgserver"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"google.golang.org/protobuf/proto"
)

// overageDoc is docs/billing.md's worked example of a monthly plan with
// overage: the rule, the signup, the month's usage and the invoice.
type overageDoc struct {
	rule    string   // the rules file
	signup  []string // allot overrides put's arguments, without "allot"
	rows    []overageRow
	invoice []string // the psql command, as a shell splits it
	printed []string // what the doc says it prints
}

// overageRow is a row of the example's table of the month's usage.
type overageRow struct {
	from              string // a time in the tenant's zone
	admitted, refused uint64
	usage, overage    uint64 // the cycle's, after the row
	notices           []float64
	line              string // the row, for messages
}

// TestBillingDocOverageExample runs docs/billing.md's worked example of
// metered overage as the cluster would: it applies the doc's rule, the
// signup's override and each row of the month's usage to a state machine
// (the one every member runs), checks after each row the cycle's usage,
// its overage and the notices recorded as the table gives them, makes
// the cycle's windows final, exports the ledger to a real PostgreSQL as
// the leader does, and runs the doc's psql command with the invoice query
// of "Billing queries": it must print what the doc shows.
func TestBillingDocOverageExample(t *testing.T) {
	doc := readOverageDoc(t)
	list, err := rules.Parse("the doc's rule", []byte(doc.rule))
	if err != nil || len(list) != 1 || list[0].Overage == nil {
		t.Fatalf("the doc's rule: %v, %+v; want one rule with overage", err, list)
	}
	r := list[0]

	// The signup: allot overrides put RULE TENANT and its flags.
	if len(doc.signup) < 4 || doc.signup[0] != "overrides" || doc.signup[1] != "put" || doc.signup[2] != r.Name {
		t.Fatalf("the signup %q: want allot overrides put %s TENANT …", doc.signup, r.Name)
	}
	tenant := doc.signup[3]
	o := &allotpb.Override{Rule: r.Name, Tenant: tenant}
	for i := 4; i+1 < len(doc.signup); i += 2 {
		switch flag, v := doc.signup[i], doc.signup[i+1]; flag {
		case "--anchor-day":
			day, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("--anchor-day %q: %v", v, err)
			}
			o.Cycle = &allotpb.Anchor{AnchorDay: int32(day), TimeZone: o.GetCycle().GetTimeZone()}
		case "--time-zone":
			o.Cycle = &allotpb.Anchor{AnchorDay: o.GetCycle().GetAnchorDay(), TimeZone: v}
		case "--limit":
			if o.Limit, err = strconv.ParseInt(v, 10, 64); err != nil {
				t.Fatalf("--limit %q: %v", v, err)
			}
		default:
			t.Fatalf("the signup's flag %s: the test knows --anchor-day, --time-zone and --limit", flag)
		}
	}
	zone, err := time.LoadLocation(o.GetCycle().GetTimeZone())
	if err != nil {
		t.Fatal(err)
	}
	at := func(row overageRow) time.Time {
		t.Helper()
		when, err := time.ParseInLocation("2006-01-02 15:04", row.from, zone)
		if err != nil {
			t.Fatalf("row %q: %v", row.line, err)
		}
		return when
	}

	st := state.New()
	apply := func(ct state.Command, m proto.Message) {
		t.Helper()
		if err, ok := st.Apply(ct, m).(error); ok {
			t.Fatalf("applying %T: %v", m, err)
		}
	}
	apply(state.CmdSettings, &fsmpb.SettingsCommand{BillingWindowNano: int64(time.Hour), ReportIntervalNano: int64(time.Second),
		LeaseTtlNano: int64(5 * time.Second), ClusterId: "0123456789abcdef0123456789abcdef"})
	apply(state.CmdRules, &fsmpb.RulesCommand{Put: []*allotpb.Rule{rulespb.ToProto(&r)}})
	signedUp := at(doc.rows[0]).Add(-time.Hour)
	apply(state.CmdOverrides, &fsmpb.OverridesCommand{Put: []*allotpb.Override{o}, NowUnixNano: signedUp.UnixNano()})

	noticed := 0
	for i, row := range doc.rows {
		when := at(row)
		now := when.Add(time.Minute)
		apply(state.CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: now.UnixNano(), Reports: []*fsmpb.AgentUsage{{
			Node: "gw-1", Incarnation: 1, Region: "us-east",
			Batch: &allotpb.UsageBatch{Seq: uint64(i + 1), CutUnixNano: now.UnixNano(), Counts: []*allotpb.UsageCount{
				{Rule: r.Name, Tenant: tenant, WindowUnix: when.Unix(), Admitted: row.admitted, Denied: row.refused},
			}},
		}}})
		var usage, overage uint64
		st.Ledger(func(l ledger.Line) bool {
			if l.Tenant == tenant && l.Rule == r.Name {
				usage, overage = usage+l.Admitted, overage+l.Overage
			}
			return true
		})
		var notices []float64
		st.EachNotice(false, func(n *allotpb.Notice) bool { notices = append(notices, n.GetThreshold()); return true })
		slices.Sort(notices)
		if usage != row.usage || overage != row.overage || !slices.Equal(notices[noticed:], row.notices) {
			t.Errorf("after the row %q: the cycle's usage %d, of it overage %d, notices %v; the doc says %d, %d, %v",
				row.line, usage, overage, notices[noticed:], row.usage, row.overage, row.notices)
		}
		noticed = len(notices)
	}

	// The cycle over, its windows final, the ledger exported.
	last := at(doc.rows[len(doc.rows)-1])
	apply(state.CmdMaintain, &fsmpb.MaintainCommand{NowUnixNano: last.AddDate(0, 1, 0).UnixNano(), AgentTimeoutNano: int64(time.Minute)})
	s, dsn := migrated(t)
	var pos ledger.Position
	for {
		lines := st.ExportPageAfter(pos, 1000)
		if len(lines) == 0 {
			break
		}
		if pos, err = s.Write(ctxFor(t, time.Minute), st.ClusterID(), pos, lines); err != nil {
			t.Fatal(err)
		}
	}
	if pos.Lines == 0 {
		t.Fatal("nothing exported")
	}

	// The doc's psql command, in a directory holding invoice.sql: the
	// invoice query of "Billing queries".
	queries := docQueryList(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "invoice.sql"), []byte(queries[len(queries)-1]+";\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	psql, err := pgserver.Program("psql")
	if err != nil {
		t.Fatal(err)
	}
	env := os.Environ()
	args := doc.invoice
	for len(args) > 0 && strings.Contains(args[0], "=") && !strings.HasPrefix(args[0], "-") {
		env = append(env, args[0])
		args = args[1:]
	}
	if len(args) == 0 || args[0] != "psql" {
		t.Fatalf("the invoice's command %q: want psql", doc.invoice)
	}
	args = slices.Clone(args[1:])
	for i, a := range args {
		if a == "$BILLING_DSN" {
			args[i] = dsn
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := osexec.CommandContext(ctx, psql, args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the doc's psql command: %v\n%s", err, out)
	}
	if got := strings.Split(strings.TrimRight(string(out), "\n"), "\n"); !slices.Equal(got, doc.printed) {
		t.Errorf("the doc's psql command printed\n%s\nthe doc shows\n%s", strings.Join(got, "\n"), strings.Join(doc.printed, "\n"))
	}
}

// docQueryList is the queries of the doc's "Billing queries" block, as
// psql runs them: without the \set lines and comments.
func docQueryList(t *testing.T) []string {
	t.Helper()
	var out []string
	for q := range strings.SplitSeq(psqlSet.ReplaceAllString(docQueries(t), ""), ";") {
		var sql []string
		for l := range strings.SplitSeq(q, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
				sql = append(sql, l)
			}
		}
		if len(sql) > 0 {
			out = append(out, strings.Join(sql, "\n"))
		}
	}
	return out
}

// readOverageDoc finds the worked example in the doc's "Metered overage".
func readOverageDoc(t *testing.T) overageDoc {
	t.Helper()
	data, err := os.ReadFile(billingDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(data), "\n## Metered overage\n")
	if !ok {
		t.Fatalf("%s has no section \"Metered overage\"", billingDoc)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var d overageDoc
	lines := strings.Split(section, "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case l == "```yaml" && d.rule == "":
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				d.rule += lines[i] + "\n"
			}
		case strings.HasPrefix(l, "$ allot overrides put "):
			d.signup = strings.Fields(strings.TrimPrefix(l, "$ allot "))
		case strings.HasPrefix(l, "| 2"):
			d.rows = append(d.rows, overageTableRow(t, l))
		case strings.HasPrefix(l, "$ ") && strings.Contains(l, " psql "):
			d.invoice = shellWords(t, strings.TrimPrefix(l, "$ "))
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				d.printed = append(d.printed, lines[i])
			}
		}
	}
	if d.rule == "" || d.signup == nil || len(d.rows) == 0 || d.invoice == nil || len(d.printed) < 2 {
		t.Fatalf("%s: did not find the example's rule, signup, month and invoice in \"Metered overage\": %+v", billingDoc, d)
	}
	return d
}

// overageTableRow reads a row of the month's table: from, admitted,
// refused, the cycle's usage, of it overage, notices.
func overageTableRow(t *testing.T, l string) overageRow {
	t.Helper()
	cells := strings.Split(strings.Trim(l, "|"), "|")
	if len(cells) != 6 {
		t.Fatalf("the row %q has %d cells, want 6", l, len(cells))
	}
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	count := func(s string) uint64 {
		n, err := strconv.ParseUint(strings.ReplaceAll(s, ",", ""), 10, 64)
		if err != nil {
			t.Fatalf("the row %q: %q is not a count", l, s)
		}
		return n
	}
	row := overageRow{from: cells[0], admitted: count(cells[1]), refused: count(cells[2]), usage: count(cells[3]), overage: count(cells[4]), line: l}
	for f := range strings.SplitSeq(cells[5], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		th, err := strconv.ParseFloat(f, 64)
		if err != nil {
			t.Fatalf("the row %q: notice %q: %v", l, f, err)
		}
		row.notices = append(row.notices, th)
	}
	return row
}

// shellWords splits a command line as a POSIX shell does for words made
// of bare characters and single- or double-quoted strings (no escapes,
// no expansions: the doc's command has none but $BILLING_DSN, which the
// test replaces).
func shellWords(t *testing.T, s string) []string {
	t.Helper()
	var (
		words []string
		cur   strings.Builder
		in    bool // inside a word
		quote rune
	)
	for _, c := range s {
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteRune(c)
		case c == '\'' || c == '"':
			quote, in = c, true
		case c == ' ' || c == '\t':
			if in {
				words, in = append(words, cur.String()), false
				cur.Reset()
			}
		case c == '\\':
			t.Fatalf("the command %q has a backslash, which shellWords does not read", s)
		default:
			cur.WriteRune(c)
			in = true
		}
	}
	if quote != 0 {
		t.Fatalf("the command %q has an unclosed quote", s)
	}
	if in {
		words = append(words, cur.String())
	}
	return words
}
