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
	if m.Period != algo.Month.Nominal() || !equalCycles(m.Cycle, &Cycle{Unit: algo.Month, AnchorDay: 17, TimeZone: "Europe/Berlin"}) {
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
