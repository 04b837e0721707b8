package billing

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/ledger"
	"github.com/allot-io/allot/rules"
)

// billRule is a tenant quota of 5 a minute, divided 60/40 between eu and
// us: 300 an hour in all, 180 in eu and 120 in us.
var billRule = &rules.Rule{Name: "quota", Scope: rules.Tenant, Algorithm: algo.FixedWindow, Limit: 5,
	Period: time.Minute, Intent: lease.Quota, Regions: map[string]float64{"eu": 0.6, "us": 0.4}}

func billFixture() []LedgerLine {
	w1 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	w2 := w1.Add(time.Hour)
	line := func(start time.Time, tenant, rule, region string, admitted, denied uint64, final bool, source int, def *rules.Rule) LedgerLine {
		return LedgerLine{Line: ledger.Line{Key: ledger.Key{Window: start.Unix(), Tenant: tenant, Rule: rule, Region: region},
			WindowSeconds: 3600, Admitted: admitted, Denied: denied, Final: final}, Source: source, Def: def}
	}
	// Leasing from a parent, eu recorded what it was granted of acme's
	// allowance in w1, us what it was in w2 (docs/regions.md).
	granted := func(l LedgerLine, g float64) LedgerLine { l.Granted = &g; return l }
	// The ledger recorded acme's cycle, from the 17th, and its limit in
	// force; huge's limit changed between its regions' reports.
	cycle := time.Date(2026, 11, 17, 5, 0, 0, 0, time.UTC).Unix()
	terms := func(l LedgerLine, limit int64) LedgerLine {
		l.Terms = ledger.Terms{CycleStart: cycle, Limit: limit}
		return l
	}
	over := func(l LedgerLine, o uint64) LedgerLine { l.Overage = o; return l }
	return []LedgerLine{
		// Given out of order, as two clusters would.
		terms(granted(line(w1, "acme", "quota", "us", 100, 3, false, 1, billRule), 110.5), 300),
		terms(line(w2, "acme", "quota", "eu", 7, 0, false, 0, billRule), 400),
		over(terms(granted(line(w1, "acme", "quota", "eu", 150, 7, true, 0, billRule), 189.5), 300), 30),
		line(w1, "beta", "quota", "eu", 9, 0, true, 0, billRule),
		// Beyond what a float64 holds exactly: totals must stay exact.
		terms(line(w1, "huge", "gone", "eu", 1<<53+1, 0, true, 0, nil), 100),
		terms(line(w1, "huge", "gone", "us", 1<<53+1, 1, true, 1, nil), 200),
	}
}

func TestMergeBillCSV(t *testing.T) {
	bill, err := Merge(billFixture())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteCSV(&out, bill); err != nil {
		t.Fatal(err)
	}
	want := `window_start,window_end,final,tenant,rule,region,admitted,denied,share,region_fraction,allowance,used,granted,cycle_start,limit,overage
2026-11-29T10:00:00Z,2026-11-29T11:00:00Z,true,acme,quota,eu,150,7,0.6000,0.6,180,0.8333,189.500,2026-11-17T05:00:00Z,300,30
2026-11-29T10:00:00Z,2026-11-29T11:00:00Z,false,acme,quota,us,100,3,0.4000,0.4,120,0.8333,110.500,2026-11-17T05:00:00Z,300,0
2026-11-29T10:00:00Z,2026-11-29T11:00:00Z,false,acme,quota,*,250,10,eu=0.6000;us=0.4000,,300,0.8333,300.000,2026-11-17T05:00:00Z,300,30
2026-11-29T10:00:00Z,2026-11-29T11:00:00Z,true,beta,quota,eu,9,0,,0.6,180,0.0500,,,,0
2026-11-29T10:00:00Z,2026-11-29T11:00:00Z,true,huge,gone,eu,9007199254740993,0,0.5000,,,,,2026-11-17T05:00:00Z,100,0
2026-11-29T10:00:00Z,2026-11-29T11:00:00Z,true,huge,gone,us,9007199254740993,1,0.5000,,,,,2026-11-17T05:00:00Z,200,0
2026-11-29T10:00:00Z,2026-11-29T11:00:00Z,true,huge,gone,*,18014398509481986,1,eu=0.5000;us=0.5000,,,,,,,0
2026-11-29T11:00:00Z,2026-11-29T12:00:00Z,false,acme,quota,eu,7,0,,0.6,180,0.0389,,2026-11-17T05:00:00Z,400,0
`
	if out.String() != want {
		t.Errorf("CSV:\n%s\nwant:\n%s", out.String(), want)
	}
	// And it reads back as CSV: every row as wide as the header.
	rows, err := csv.NewReader(&out).ReadAll()
	if err != nil || len(rows) != 9 {
		t.Fatalf("reading the CSV back: %d rows, %v", len(rows), err)
	}
}

func TestMergeBillJSONL(t *testing.T) {
	bill, err := Merge(billFixture())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteJSONL(&out, bill); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 8 {
		t.Fatalf("%d lines, want 8:\n%s", len(lines), out.String())
	}
	type row struct {
		Region     string             `json:"region"`
		Tenant     string             `json:"tenant"`
		Total      bool               `json:"total"`
		Final      bool               `json:"final"`
		Admitted   uint64             `json:"admitted"`
		Denied     uint64             `json:"denied"`
		Share      *float64           `json:"share"`
		Shares     map[string]float64 `json:"shares"`
		Allowance  *json.Number       `json:"allowance"`
		Granted    *json.Number       `json:"granted"`
		CycleStart string             `json:"cycle_start"`
		Limit      *int64             `json:"limit"`
		Overage    uint64             `json:"overage"`
	}
	var rows []row
	for _, l := range lines {
		dec := json.NewDecoder(strings.NewReader(l))
		dec.UseNumber()
		var r row
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		rows = append(rows, r)
	}
	total := rows[2]
	if !total.Total || total.Region != "*" || total.Admitted != 250 || total.Denied != 10 || total.Final ||
		total.Shares["eu"] != 0.6 || total.Shares["us"] != 0.4 || total.Allowance.String() != "300" || total.Granted.String() != "300.000" {
		t.Errorf("acme total line: %+v", total)
	}
	if eu := rows[0]; eu.Region != "eu" || eu.Share == nil || *eu.Share != 0.6 || !eu.Final || eu.Allowance.String() != "180" || eu.Granted.String() != "189.500" {
		t.Errorf("acme eu line: %+v", eu)
	}
	if total.CycleStart != "2026-11-17T05:00:00Z" || total.Limit == nil || *total.Limit != 300 || total.Overage != 30 {
		t.Errorf("acme total line: cycle %q, limit %v, overage %d; want its regions' terms and overage", total.CycleStart, total.Limit, total.Overage)
	}
	if huge := rows[6]; huge.Admitted != 1<<54+2 || huge.Allowance != nil || huge.Granted != nil || huge.CycleStart != "" || huge.Limit != nil {
		t.Errorf("huge total line: %+v (want 18014398509481986 exactly, no allowance, no terms its regions differ on)", huge)
	}
	if beta := rows[3]; beta.CycleStart != "" || beta.Limit != nil || strings.Contains(lines[3], "cycle_start") {
		t.Errorf("beta line, without terms: %s", lines[3])
	}
	if !strings.Contains(lines[6], `"admitted":18014398509481986`) {
		t.Errorf("total not written as an exact integer: %s", lines[6])
	}
}

func TestMergeBillTable(t *testing.T) {
	bill, err := Merge(billFixture())
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := WriteTable(&out, bill, time.Time{}, time.Time{}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	for _, want := range []struct {
		line int
		has  []string
	}{
		{0, []string{"WINDOW", "FINAL", "REGION", "ADMITTED", "SHARE", "ALLOWANCE", "GRANTED", "CYCLE", "LIMIT", "OVERAGE"}},
		{1, []string{"2026-11-29T10:00:00Z", "yes", "acme", "eu", "150", "60.00%", "180", "83.33%", "189.500", "2026-11-17T05:00:00Z", "300    30"}},
		{2, []string{"no", "acme", "us", "100", "40.00%", "120"}},
		{3, []string{"no", "acme", "*", "250", "10", "eu=60.00% us=40.00%", "300", "83.33%"}},
		{7, []string{"18014398509481986"}},
	} {
		for _, s := range want.has {
			if !strings.Contains(lines[want.line], s) {
				t.Errorf("table line %d %q lacks %q", want.line, lines[want.line], s)
			}
		}
	}
	if !strings.Contains(out.String(), "2 lines in windows not yet final") {
		t.Errorf("no note on windows not final:\n%s", out.String())
	}
	var empty bytes.Buffer
	if err := WriteTable(&empty, nil, time.Unix(0, 0), time.Unix(3600, 0)); err != nil || !strings.HasPrefix(empty.String(), "no usage") {
		t.Errorf("empty bill: %q, %v", empty.String(), err)
	}
}

func TestMergeBillRefusesDoubleCounting(t *testing.T) {
	lines := billFixture()
	dup := lines[2]
	dup.Source = 1 // the same region's line from a second cluster
	if _, err := Merge(append(lines, dup)); err == nil || !strings.Contains(err.Error(), "counted by two clusters") {
		t.Fatalf("mergeBill with a line from two clusters: %v", err)
	}
}

// TestMergeBillNamesBothClusters: the double count is a
// *CountedTwiceError holding both lines, so that a caller can say which
// of its sources to give once.
func TestMergeBillNamesBothClusters(t *testing.T) {
	lines := billFixture()
	dup := lines[2]
	dup.Source = 1
	_, err := Merge(append(lines, dup))
	var twice *CountedTwiceError
	if !errors.As(err, &twice) || twice.Lines[0].Source != 0 || twice.Lines[1].Source != 1 || twice.Lines[0].Region != "eu" ||
		err.Error() != "tenant acme, rule quota, region eu, window 2026-11-29T10:00:00Z was counted by two clusters (#1 and #2)" {
		t.Fatalf("Merge with a line from two clusters: %#v", err)
	}
}

// TestGoneRule: a line whose rule its cluster no longer has is billed
// with no fraction and no allowance, not as a rule that allows nothing.
func TestGoneRule(t *testing.T) {
	if a := allowance(nil, "acme", time.Hour); a != nil {
		t.Errorf("allowance of a gone rule = %v, want unknown", a)
	}
	whole := big.NewRat(300, 1)
	if f, part := regionPart(nil, "eu", whole); f != "" || part != whole {
		t.Errorf("regionPart of a gone rule = %q, %v; want no fraction, the whole", f, part)
	}
	if got := ratText(allowance(billRule, "acme", time.Hour), 3); got != "300" {
		t.Errorf("allowance of a known rule = %q, want 300", got)
	}
}
