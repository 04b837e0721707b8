package allotpb

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

// TestBoundNameFits: every name, whatever its bytes, becomes valid UTF-8
// within MaxNameLen; a name that already fits is kept; distinct names
// stay distinct; and bounding twice changes nothing.
func TestBoundNameFits(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		a := string(rapid.SliceOfN(rapid.Byte(), 0, 600).Draw(rt, "a"))
		b := string(rapid.SliceOfN(rapid.Byte(), 0, 600).Draw(rt, "b"))
		ba := BoundName(a)
		if len(ba) > MaxNameLen || !utf8.ValidString(ba) {
			rt.Fatalf("BoundName(%q) = %q: %d bytes, valid %v", a, ba, len(ba), utf8.ValidString(ba))
		}
		if len(a) <= MaxNameLen && utf8.ValidString(a) && ba != a {
			rt.Fatalf("BoundName changed %q, which fits, to %q", a, ba)
		}
		if a != b && ba == BoundName(b) {
			rt.Fatalf("%q and %q both bound to %q", a, b, ba)
		}
		if BoundName(ba) != ba {
			rt.Fatalf("bounding %q again gave %q", ba, BoundName(ba))
		}
	})
}

// TestValidateReportNamesEveryEntry: each bad entry is named by its index
// and field, so an agent can drop exactly it.
func TestValidateReportNamesEveryEntry(t *testing.T) {
	req := &ReportRequest{Node: "gw-1", Incarnation: 1,
		Demand: []*KeyDemand{{Rule: "r", Key: "ok"}, {Rule: "r", Key: "\xff"}, {Rule: "r", Priority: 256}, {Rule: "r", Admitted: math.NaN()}},
		Usage:  &UsageBatch{Seq: 1, Counts: []*UsageCount{{Rule: "r", Tenant: "ok"}, {Rule: "r", Tenant: strings.Repeat("t", 257)}, {Rule: "r", Tenant: "\xfe"}, {Rule: "", Tenant: "x"}, {Rule: "r", Admitted: MaxCount + 1}}},
	}
	want := []string{"demand[1].key", "demand[2].priority", "demand[3].admitted", "usage.counts[1].tenant", "usage.counts[2].tenant", "usage.counts[3].rule", "usage.counts[4].admitted"}
	got := ValidateReport(req, ReportLimits{})
	if len(got) != len(want) {
		t.Fatalf("got %d violations %+v; want %v", len(got), got, want)
	}
	for i, v := range got {
		if v.Field != want[i] {
			t.Errorf("violation %d: %s (%s); want %s", i, v.Field, v.Description, want[i])
		}
	}
	if v := ValidateReport(&ReportRequest{Node: "\xff", Incarnation: 1}, ReportLimits{}); len(v) != 1 || v[0].Field != "node" || v[0].Count != -1 || v[0].Demand != -1 {
		t.Errorf("a node name that is not UTF-8: %+v", v)
	}
}

func TestSaturatingAdd(t *testing.T) {
	if got := SaturatingAdd(math.MaxUint64-1, 5); got != math.MaxUint64 {
		t.Errorf("SaturatingAdd near the top = %d", got)
	}
	if got := SaturatingAdd(3, 4); got != 7 {
		t.Errorf("SaturatingAdd(3, 4) = %d", got)
	}
}

// FuzzValidateReport decodes any bytes as a report and validates it: it
// never panics, lists at most MaxViolations, names a field in each, and a
// report it passes holds only numbers and names within the limits.
func FuzzValidateReport(f *testing.F) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	lim := ReportLimits{MaxKeys: 50, MinWindowUnix: now.Add(-48 * time.Hour).Unix(), MaxWindowUnix: now.Add(time.Hour).Unix(),
		NowUnixNano: now.UnixNano(), MaxSkew: time.Hour, MaxUnitsPerSecond: 1e6, BillingWindow: time.Hour}
	seed := func(r *ReportRequest) {
		b, err := proto.Marshal(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&ReportRequest{Node: "gw-1", Incarnation: 1, SentUnixNano: now.UnixNano(), IntervalNano: int64(time.Second),
		Demand: []*KeyDemand{{Rule: "r", Key: "k", Tenant: "t", Priority: 3, Admitted: 10, Denied: 2, Held: 4, Weight: 1}},
		Usage:  &UsageBatch{Seq: 1, CutUnixNano: now.UnixNano(), Counts: []*UsageCount{{Rule: "r", Tenant: "t", WindowUnix: now.Unix(), Admitted: 9}}}})
	seed(&ReportRequest{Node: "gw-1", Incarnation: 1, Demand: []*KeyDemand{{Rule: "r", Priority: 300, Admitted: math.Inf(1)}}})
	seed(&ReportRequest{Node: strings.Repeat("n", 300), SentUnixNano: math.MinInt64, Usage: &UsageBatch{CutUnixNano: math.MaxInt64}})
	// A key's own limit (an Envoy descriptor's), good and bad.
	seed(&ReportRequest{Node: "gw-1", Incarnation: 1, Demand: []*KeyDemand{{Rule: "r", Key: "k\x00limit:20/1m0s", Limit: 20, PeriodNano: int64(time.Minute)}}})
	seed(&ReportRequest{Node: "gw-1", Incarnation: 1, Demand: []*KeyDemand{{Rule: "r", Key: "k", Limit: -1, PeriodNano: math.MaxInt64}, {Rule: "r", Limit: 1}}})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req ReportRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		vs := ValidateReport(&req, lim)
		if len(vs) > MaxViolations {
			t.Fatalf("%d violations", len(vs))
		}
		for _, v := range vs {
			if v.Field == "" || v.Description == "" {
				t.Fatalf("a violation without a field or a description: %+v", v)
			}
		}
		if len(vs) > 0 {
			return
		}
		if req.GetNode() == "" || len(req.GetNode()) > MaxNameLen || req.GetIncarnation() == 0 {
			t.Fatalf("passed node %q incarnation %d", req.GetNode(), req.GetIncarnation())
		}
		if s := req.GetSentUnixNano(); s != 0 && (s < now.Add(-time.Hour).UnixNano() || s > now.Add(time.Hour).UnixNano()) {
			t.Fatalf("passed sent_unix_nano %d", s)
		}
		for _, d := range req.GetDemand() {
			for _, x := range []float64{d.GetAdmitted(), d.GetDenied(), d.GetHeld(), d.GetCommitted(), d.GetWeight()} {
				if !(x >= 0) || x > MaxCount {
					t.Fatalf("passed demand number %v", x)
				}
			}
			if d.GetPriority() > MaxPriority || d.GetAdmitted()+d.GetDenied() > 1e6*math.Max(float64(req.GetIntervalNano())/1e9, 1) {
				t.Fatalf("passed demand %+v", d)
			}
			if l, p := d.GetLimit(), d.GetPeriodNano(); (l != 0 || p != 0) && (l <= 0 || l > MaxCount || p <= 0 || p > int64(MaxPeriod)) {
				t.Fatalf("passed a key limit of %d per %d ns", l, p)
			}
		}
		for _, c := range req.GetUsage().GetCounts() {
			if c.GetWindowUnix() < lim.MinWindowUnix || c.GetWindowUnix() > lim.MaxWindowUnix || float64(c.GetAdmitted())+float64(c.GetDenied()) > 1e6*3600 {
				t.Fatalf("passed count %+v", c)
			}
		}
	})
}

// TestValidateReportKeyLimit: a key's own limit is both fields or
// neither, within the bounds a rule's limit and period have, and the
// violation names the field at fault.
func TestValidateReportKeyLimit(t *testing.T) {
	for _, tc := range []struct {
		limit, period int64
		field         string
	}{
		{0, 0, ""},
		{20, int64(time.Minute), ""},
		{MaxCount, int64(MaxPeriod), ""},
		{-5, int64(time.Minute), "demand[0].limit"},
		{math.MaxInt64, int64(time.Minute), "demand[0].limit"},
		{0, int64(time.Minute), "demand[0].limit"},
		{20, 0, "demand[0].period_nano"},
		{20, -1, "demand[0].period_nano"},
		{20, math.MaxInt64, "demand[0].period_nano"},
	} {
		req := &ReportRequest{Node: "gw-1", Incarnation: 1, Demand: []*KeyDemand{{Rule: "r", Key: "k", Limit: tc.limit, PeriodNano: tc.period}}}
		vs := ValidateReport(req, ReportLimits{})
		switch {
		case tc.field == "" && len(vs) > 0:
			t.Errorf("%d per %d: refused %+v", tc.limit, tc.period, vs)
		case tc.field != "" && (len(vs) != 1 || vs[0].Field != tc.field || vs[0].Demand != 0):
			t.Errorf("%d per %d: got %+v; want one violation of %s", tc.limit, tc.period, vs, tc.field)
		}
	}
}

// TestValidateReportGroups: the shard groups a report names, for itself
// and as its reporter, are group IDs or empty; a bad one refuses the
// report whole, without repeating an over-long name.
func TestValidateReportGroups(t *testing.T) {
	long := strings.Repeat("g", 1<<20)
	for _, tc := range []struct {
		group, reporter string
		field           string
	}{
		{"", "", ""},
		{"main", "eu-1.b_2", ""},
		{strings.Repeat("g", MaxGroupLen), "", ""},
		{strings.Repeat("g", MaxGroupLen+1), "", "group"},
		{"a b", "", "group"},
		{"", long, "reporter_group"},
		{"", "g\x00", "reporter_group"},
		{"", "é", "reporter_group"},
	} {
		vs := ValidateReport(&ReportRequest{Node: "region-eu", Incarnation: 1, Group: tc.group, ReporterGroup: tc.reporter}, ReportLimits{})
		switch {
		case tc.field == "" && len(vs) > 0:
			t.Errorf("%.20q/%.20q: refused %+v", tc.group, tc.reporter, vs)
		case tc.field != "" && (len(vs) != 1 || vs[0].Field != tc.field || vs[0].Count != -1 || vs[0].Demand != -1):
			t.Errorf("%.20q/%.20q: got %+v; want the report refused whole for %s", tc.group, tc.reporter, vs, tc.field)
		case len(vs) == 1 && len(vs[0].Description) > 200:
			t.Errorf("%.20q/%.20q: a description of %d bytes", tc.group, tc.reporter, len(vs[0].Description))
		}
	}
}
