package algo

import (
	"errors"
	"testing"
	"time"
	_ "time/tzdata" // the zones the tests name, wherever they run

	"pgregory.net/rapid"
)

func mustZone(t interface {
	Helper()
	Fatalf(string, ...any)
}, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("time zone %s: %v", name, err)
	}
	return loc
}

// A cycle is counted where the customer is, from the day they signed up.
func TestCalendarWindows(t *testing.T) {
	berlin, ny := mustZone(t, "Europe/Berlin"), mustZone(t, "America/New_York")
	at := func(loc *time.Location, y int, m time.Month, d, h int) time.Time {
		return time.Date(y, m, d, h, 0, 0, 0, loc)
	}
	for _, tc := range []struct {
		name       string
		cal        Calendar
		t          time.Time
		start, end time.Time
	}{
		{"a month from the 1st, UTC", Calendar{Unit: Month}, at(time.UTC, 2027, 3, 15, 12),
			at(time.UTC, 2027, 3, 1, 0), at(time.UTC, 2027, 4, 1, 0)},
		{"signed up on the 17th, before this month's 17th", Calendar{Unit: Month, Anchor: 17, Location: berlin}, at(berlin, 2027, 3, 16, 23),
			at(berlin, 2027, 2, 17, 0), at(berlin, 2027, 3, 17, 0)},
		{"signed up on the 17th, on it", Calendar{Unit: Month, Anchor: 17, Location: berlin}, at(berlin, 2027, 3, 17, 0),
			at(berlin, 2027, 3, 17, 0), at(berlin, 2027, 4, 17, 0)},
		{"the 31st renews on February's last day", Calendar{Unit: Month, Anchor: 31}, at(time.UTC, 2027, 3, 1, 0),
			at(time.UTC, 2027, 2, 28, 0), at(time.UTC, 2027, 3, 31, 0)},
		{"and on the 29th in a leap year", Calendar{Unit: Month, Anchor: 31}, at(time.UTC, 2028, 2, 29, 5),
			at(time.UTC, 2028, 2, 29, 0), at(time.UTC, 2028, 3, 31, 0)},
		{"the 31st in April is the 30th", Calendar{Unit: Month, Anchor: 31}, at(time.UTC, 2027, 5, 30, 0),
			at(time.UTC, 2027, 4, 30, 0), at(time.UTC, 2027, 5, 31, 0)},
		{"across a year", Calendar{Unit: Month, Anchor: 17}, at(time.UTC, 2027, 1, 3, 0),
			at(time.UTC, 2026, 12, 17, 0), at(time.UTC, 2027, 1, 17, 0)},
		{"a day that loses an hour", Calendar{Unit: Day, Location: ny}, at(ny, 2027, 3, 14, 12),
			at(ny, 2027, 3, 14, 0), at(ny, 2027, 3, 15, 0)},
		{"a week from Monday", Calendar{Unit: Week, Anchor: int(time.Monday)}, at(time.UTC, 2027, 3, 14, 9), // a Sunday
			at(time.UTC, 2027, 3, 8, 0), at(time.UTC, 2027, 3, 15, 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.cal.Validate(); err != nil {
				t.Fatal(err)
			}
			start := tc.cal.Start(tc.t)
			if !start.Equal(tc.start) {
				t.Errorf("Start(%v) = %v, want %v", tc.t, start, tc.start)
			}
			if end := tc.cal.Next(start); !end.Equal(tc.end) {
				t.Errorf("Next(%v) = %v, want %v", start, end, tc.end)
			}
		})
	}
	if d := (Calendar{Unit: Day, Location: ny}).Next(at(ny, 2027, 3, 14, 0)).Sub(at(ny, 2027, 3, 14, 0)); d != 23*time.Hour {
		t.Errorf("the day daylight-saving time starts lasts %v, want 23h", d)
	}
}

func TestCalendarValidate(t *testing.T) {
	for _, c := range []Calendar{
		{},
		{Unit: 9},
		{Unit: Month, Anchor: 32},
		{Unit: Month, Anchor: -1},
		{Unit: Week, Anchor: 7},
		{Unit: Day, Anchor: 3},
	} {
		if err := c.Validate(); !errors.Is(err, ErrCalendar) {
			t.Errorf("%+v: Validate() = %v, want ErrCalendar", c, err)
		}
	}
	for _, cfg := range []Config{
		{Algorithm: SlidingWindow, Limit: 10, Period: 30 * 24 * time.Hour, Calendar: Calendar{Unit: Month}},
		{Algorithm: FixedWindow, Limit: 10, Period: time.Hour, Calendar: Calendar{Unit: Month}},
		{Algorithm: FixedWindow, Limit: 10, Period: 30 * 24 * time.Hour, Calendar: Calendar{Unit: Month, Anchor: 40}},
	} {
		var ce *ConfigError
		if err := cfg.Validate(); !errors.As(err, &ce) {
			t.Errorf("%+v: Validate() = %v, want a ConfigError", cfg, err)
		}
	}
}

// Every instant is in exactly one window: windows hold their instants and
// follow one another without gaps or overlaps, in every zone and anchor.
func TestPropertyCalendarWindowsTile(t *testing.T) {
	zones := []string{"UTC", "Europe/Berlin", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe", "Pacific/Chatham"}
	rapid.Check(t, func(t *rapid.T) {
		c := Calendar{Unit: CalendarUnit(rapid.IntRange(1, 3).Draw(t, "unit"))}
		switch c.Unit {
		case Month:
			c.Anchor = rapid.IntRange(1, 31).Draw(t, "day")
		case Week:
			c.Anchor = rapid.IntRange(0, 6).Draw(t, "weekday")
		}
		c.Location = mustZone(t, rapid.SampledFrom(zones).Draw(t, "zone"))
		at := time.Unix(rapid.Int64Range(0, 4_000_000_000).Draw(t, "unix"), 0)
		start := c.Start(at)
		next := c.Next(start)
		if start.After(at) || !next.After(at) {
			t.Fatalf("%v: %v is not in [%v, %v)", c, at, start, next)
		}
		if s := c.Start(next); !s.Equal(next) {
			t.Fatalf("%v: the window after [%v, %v) starts at %v", c, start, next, s)
		}
		if s := c.Start(next.Add(-time.Nanosecond)); !s.Equal(start) {
			t.Fatalf("%v: the last instant of [%v, %v) is in a window from %v", c, start, next, s)
		}
		if n := c.Unit.Nominal(); next.Sub(start) < n-3*24*time.Hour || next.Sub(start) > n+2*24*time.Hour {
			t.Fatalf("%v: window [%v, %v) is %v long", c, start, next, next.Sub(start))
		}
	})
}

// A fixed window on the calendar admits its limit once per cycle, renews
// on the anchor day, and says so in its reset.
func TestFixedWindowOnTheCalendar(t *testing.T) {
	berlin := mustZone(t, "Europe/Berlin")
	l, err := New(Config{Algorithm: FixedWindow, Limit: 3, Period: Month.Nominal(),
		Calendar: Calendar{Unit: Month, Anchor: 31, Location: berlin}})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2027, 2, 27, 12, 0, 0, 0, berlin)
	for i := range 3 {
		if d := l.AllowAt(now, 1); !d.Allowed {
			t.Fatalf("request %d of 3 refused", i+1)
		}
	}
	d := l.AllowAt(now, 1)
	if d.Allowed {
		t.Fatal("the 4th request of a 3-a-month quota admitted")
	}
	renews := time.Date(2027, 2, 28, 0, 0, 0, 0, berlin) // the 31st's renewal in February
	if got := now.Add(d.RetryAfter); !got.Equal(renews) {
		t.Errorf("retry at %v, want %v", got, renews)
	}
	if d := l.AllowAt(renews.Add(-time.Nanosecond), 1); d.Allowed {
		t.Error("admitted an instant before the cycle renews")
	}
	if d := l.AllowAt(renews, 1); !d.Allowed {
		t.Error("refused when the cycle renewed")
	}
	if d := l.AllowAt(time.Date(2027, 3, 30, 23, 0, 0, 0, berlin), 2); !d.Allowed || d.Remaining != 0 {
		t.Errorf("March 30th: %+v, want the cycle's last 2 admitted", d)
	}
}

func BenchmarkFixedWindowCalendar(b *testing.B) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"epoch", Config{Algorithm: FixedWindow, Limit: 1 << 40, Period: Month.Nominal()}},
		{"calendar", Config{Algorithm: FixedWindow, Limit: 1 << 40, Period: Month.Nominal(), Calendar: Calendar{Unit: Month, Anchor: 17, Location: mustZone(b, "Europe/Berlin")}}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			l, err := New(tc.cfg)
			if err != nil {
				b.Fatal(err)
			}
			now := time.Date(2027, 3, 20, 0, 0, 0, 0, time.UTC)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				l.AllowAt(now.Add(time.Duration(i)), 1)
			}
		})
	}
}
