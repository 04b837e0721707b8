package rules

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones the tests name, wherever they run

	"github.com/allot-io/allot/algo"
)

const monthly = `rules:
  - name: monthly
    scope: tenant
    algorithm: fixed_window
    limit: 100000
    period: month
    cycle: {anchor_day: 17, time_zone: Europe/Berlin}
    intent: quota
  - name: daily
    scope: tenant
    algorithm: fixed_window
    limit: 5000
    period: "day"
    intent: quota
`

// A plan's quota is written as it is sold: a month from the day the
// customer signed up, in their time zone.
func TestParseCalendarPeriods(t *testing.T) {
	list, err := Parse("rules.yaml", []byte(monthly))
	if err != nil {
		t.Fatal(err)
	}
	m, d := list[0], list[1]
	if m.Period != algo.Month.Nominal() || !equalCycles(m.Cycle, &Cycle{Unit: algo.Month, Anchor: Anchor{AnchorDay: 17, TimeZone: "Europe/Berlin"}}) {
		t.Fatalf("monthly: period %v, cycle %+v", m.Period, m.Cycle)
	}
	if d.Period != 24*time.Hour || d.Cycle == nil || !equalCycles(d.Cycle, &Cycle{Unit: algo.Day}) {
		t.Fatalf("daily: period %v, cycle %+v", d.Period, d.Cycle)
	}
	berlin, _ := time.LoadLocation("Europe/Berlin")
	at := time.Date(2027, 3, 16, 23, 0, 0, 0, berlin)
	if got, want := m.WindowStart(at), time.Date(2027, 2, 17, 0, 0, 0, 0, berlin); !got.Equal(want) {
		t.Errorf("WindowStart(%v) = %v, want %v", at, got, want)
	}
	// Written back and read again: the same rules.
	var buf bytes.Buffer
	if err := WriteYAML(&buf, list); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "period: month") {
		t.Errorf("written as:\n%s", buf.String())
	}
	back, err := Parse("written.yaml", buf.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	for i := range list {
		if !Equal(&list[i], &back[i]) {
			t.Errorf("rule %s written and read back differs:\n%+v\n%+v", list[i].Name, list[i], back[i])
		}
	}
}

func TestParseCalendarPeriodErrors(t *testing.T) {
	const head = "rules:\n  - name: q\n    scope: tenant\n    limit: 10\n    intent: quota\n"
	for _, tt := range []struct {
		name, src   string
		line        int
		field, want string
	}{
		{"an algorithm that cannot count the calendar", head + "    algorithm: sliding_window\n    period: month\n", 7, "period", "only fixed_window can"},
		{"anchor day past 31", head + "    algorithm: fixed_window\n    period: month\n    cycle: {anchor_day: 32}\n", 8, "cycle.anchor_day", "from 1 to 31"},
		{"an anchor day on a week", head + "    algorithm: fixed_window\n    period: week\n    cycle: {anchor_day: 3}\n", 8, "cycle.anchor_day", "applies to a monthly period"},
		{"an unknown time zone", head + "    algorithm: fixed_window\n    period: month\n    cycle: {time_zone: Mars/Olympus}\n", 8, "cycle.time_zone", `unknown time zone "Mars/Olympus"`},
		{"a cycle on a duration", head + "    algorithm: fixed_window\n    period: 1h\n    cycle: {anchor_day: 3}\n", 8, "cycle", "set period to day, week or month"},
		{"a period that is no unit", head + "    algorithm: fixed_window\n    period: fortnight\n", 7, "period", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tt.src))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v, want an *Error", err)
			}
			if e.Line != tt.line || e.Field != tt.field || !strings.Contains(e.Msg, tt.want) {
				t.Errorf("got line %d field %q: %s; want line %d field %q containing %q", e.Line, e.Field, e.Msg, tt.line, tt.field, tt.want)
			}
		})
	}
}

// A tenant counts in the cycle of the entry whose limit it has, unless an
// override from the API anchors it.
func TestCycleFor(t *testing.T) {
	r := Rule{Name: "monthly", Scope: Tenant, Algorithm: algo.FixedWindow, Limit: 100, Period: algo.Month.Nominal(), Intent: 2,
		Cycle: &Cycle{Unit: algo.Month, Anchor: Anchor{AnchorDay: 1}},
		Plans: map[string]Plan{"pro": {Cycle: Anchor{AnchorDay: 5}}, "team": {Limit: 500}},
		Tenants: map[string]TenantOverride{
			"big":   {Limit: 1000, Cycle: Anchor{AnchorDay: 9, TimeZone: "Asia/Tokyo"}},
			"plain": {Limit: 200},
		}}
	if errs := r.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, tc := range []struct {
		name         string
		o            TenantOverride
		ok           bool
		tenant, plan string
		want         Anchor
	}{
		{"the rule's", TenantOverride{}, false, "acme", "", Anchor{AnchorDay: 1}},
		{"the plan's", TenantOverride{}, false, "acme", "pro", Anchor{AnchorDay: 5}},
		{"a plan with a limit and no cycle: the rule's", TenantOverride{}, false, "acme", "team", Anchor{AnchorDay: 1}},
		{"the file's tenant entry", TenantOverride{}, false, "big", "pro", Anchor{AnchorDay: 9, TimeZone: "Asia/Tokyo"}},
		{"a file tenant entry without a cycle replaces its plan's", TenantOverride{}, false, "plain", "pro", Anchor{AnchorDay: 1}},
		{"an API override's limit keeps the plan's cycle", TenantOverride{Limit: 7}, true, "acme", "pro", Anchor{AnchorDay: 5}},
		{"an API override's anchor wins", TenantOverride{Cycle: Anchor{AnchorDay: 17, TimeZone: "America/New_York"}}, true, "big", "pro", Anchor{AnchorDay: 17, TimeZone: "America/New_York"}},
	} {
		if got := r.CycleFor(tc.o, tc.ok, tc.tenant, tc.plan); got.Unit != algo.Month || got.Anchor != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
	minute := Rule{Name: "m", Scope: Tenant, Algorithm: algo.FixedWindow, Limit: 5, Period: time.Minute, Intent: 2}
	if c := minute.CycleFor(TenantOverride{Cycle: Anchor{AnchorDay: 3}}, true, "acme", ""); c != nil {
		t.Errorf("a rule counted in minutes has cycle %+v", c)
	}
}

func TestAnchorErrors(t *testing.T) {
	const head = "rules:\n  - name: q\n    scope: tenant\n    limit: 10\n    intent: quota\n    algorithm: fixed_window\n"
	for _, tt := range []struct {
		name, src   string
		field, want string
	}{
		{"a plan's anchor on a rule in minutes", head + "    period: 1m\n    plans:\n      pro: {cycle: {anchor_day: 5}}\n", "plans.pro.cycle", "the rule counts none"},
		{"a plan's anchor day past 31", head + "    period: month\n    plans:\n      pro: {cycle: {anchor_day: 40}}\n", "plans.pro.cycle.anchor_day", "from 1 to 31"},
		{"a tenant's unknown zone", head + "    period: month\n    tenants:\n      acme: {limit: 5, cycle: {time_zone: Nowhere/Land}}\n", "tenants.acme.cycle.time_zone", "unknown time zone"},
		{"a file tenant's cycle without a limit", head + "    period: month\n    tenants:\n      acme: {cycle: {anchor_day: 3}}\n", "tenants.acme.cycle", "goes with its limit"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("rules.yaml", []byte(tt.src))
			var e *Error
			if !errors.As(err, &e) || e.Field != tt.field || !strings.Contains(e.Msg, tt.want) {
				t.Errorf("Parse = %v; want field %q: %q", err, tt.field, tt.want)
			}
		})
	}
}

func TestCycleAt(t *testing.T) {
	ny, _ := time.LoadLocation("America/New_York")
	monthly := Rule{Name: "m", Period: algo.Month.Nominal(), Cycle: &Cycle{Unit: algo.Month}}
	at := time.Date(2027, 3, 16, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		r          Rule
		o          TenantOverride
		ok         bool
		start, end time.Time
	}{
		{"the rule's month", monthly, TenantOverride{}, false, time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 4, 1, 0, 0, 0, 0, time.UTC)},
		{"the tenant's own", monthly, TenantOverride{Cycle: Anchor{AnchorDay: 17, TimeZone: "America/New_York"}}, true,
			time.Date(2027, 2, 17, 0, 0, 0, 0, ny), time.Date(2027, 3, 17, 0, 0, 0, 0, ny)},
		{"a 7-minute period, from the epoch", Rule{Name: "w", Period: 7 * time.Minute}, TenantOverride{}, false,
			time.Date(2027, 3, 16, 11, 57, 0, 0, time.UTC), time.Date(2027, 3, 16, 12, 4, 0, 0, time.UTC)},
	} {
		start, end := tc.r.CycleAt(tc.o, tc.ok, "acme", "", at)
		if !start.Equal(tc.start) || !end.Equal(tc.end) {
			t.Errorf("%s: [%v, %v), want [%v, %v)", tc.name, start, end, tc.start, tc.end)
		}
	}
}
