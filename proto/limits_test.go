package allotpb

import (
	"math"
	"strings"
	"testing"
	"unicode/utf8"

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
