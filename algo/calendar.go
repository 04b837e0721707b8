package algo

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// A plan is sold by the month, renewed on the day the customer signed up,
// in the customer's time zone: "100,000 calls a month" means from the 17th
// to the 17th, not per 720 hours since the Unix epoch. A Calendar gives a
// fixed window such boundaries. Its windows are not all the same length (a
// month has 28 to 31 days, a day 23 to 25 hours across a daylight-saving
// change), so it is kept apart from Period, which stays the nominal length
// that rates and estimates are computed from.

// CalendarUnit is the length of a calendar window.
type CalendarUnit uint8

const (
	// Day windows start at midnight.
	Day CalendarUnit = iota + 1
	// Week windows start at midnight on the anchor weekday.
	Week
	// Month windows start at midnight on the anchor day of the month.
	Month
)

// String returns the unit as rules files spell it: day, week, month.
func (u CalendarUnit) String() string {
	switch u {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
}

// Nominal is the unit's nominal length, the Period of a rule counted in
// it: what per-second rates and demand estimates are computed from. A
// month is 30 days; its windows are 28 to 31.
func (u CalendarUnit) Nominal() time.Duration {
	switch u {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	}
	return 0
}

// Calendar is how a fixed window counts on the calendar: windows of Unit,
// starting at midnight in Location, on the Anchor day. It is a value; two
// calendars with the same fields count the same windows.
type Calendar struct {
	Unit CalendarUnit
	// Anchor is, for Month, the day of the month a window starts (1–31; a
	// day past a month's end starts it on the month's last day, so a
	// cycle anchored on the 31st renews on 28 or 29 February and on 30
	// April); for Week, the weekday (0 Sunday … 6 Saturday). 0 is the 1st
	// and Sunday. Day has none.
	Anchor int
	// Location is the time zone whose midnights start the windows; nil is
	// UTC.
	Location *time.Location
}

// ErrCalendar is wrapped by every error a Calendar's Validate returns.
var ErrCalendar = errors.New("invalid calendar")

// Validate reports the first problem with c.
func (c Calendar) Validate() error {
	switch c.Unit {
	case Day:
		if c.Anchor != 0 {
			return fmt.Errorf("%w: a day has no anchor (got %d)", ErrCalendar, c.Anchor)
		}
	case Week:
		if c.Anchor < 0 || c.Anchor > 6 {
			return fmt.Errorf("%w: a week's anchor is a weekday from 0 (Sunday) to 6 (Saturday), got %d", ErrCalendar, c.Anchor)
		}
	case Month:
		if c.Anchor < 0 || c.Anchor > 31 {
			return fmt.Errorf("%w: a month's anchor is a day from 1 to 31, got %d", ErrCalendar, c.Anchor)
		}
	default:
		return fmt.Errorf("%w: unknown unit %d (want day, week or month)", ErrCalendar, uint8(c.Unit))
	}
	return nil
}

func (c Calendar) loc() *time.Location {
	if c.Location == nil {
		return time.UTC
	}
	return c.Location
}

// Equal reports whether c and o count the same windows.
func (c Calendar) Equal(o Calendar) bool {
	return c.Unit == o.Unit && c.anchor() == o.anchor() && c.loc().String() == o.loc().String()
}

func (c Calendar) anchor() int {
	if c.Unit == Month && c.Anchor == 0 {
		return 1
	}
	return c.Anchor
}

// String is the calendar as the rules file writes it: "month from day 17
// in Europe/Berlin".
func (c Calendar) String() string {
	switch c.Unit {
	case Month:
		return fmt.Sprintf("month from day %d in %s", c.anchor(), c.loc())
	case Week:
		return fmt.Sprintf("week from %s in %s", time.Weekday(c.Anchor), c.loc())
	}
	return fmt.Sprintf("%s in %s", c.Unit, c.loc())
}

// Start returns the start of the window holding t.
func (c Calendar) Start(t time.Time) time.Time {
	l := t.In(c.loc())
	y, m, d := l.Date()
	switch c.Unit {
	case Week:
		s := c.midnight(y, m, d-(int(l.Weekday())-c.Anchor+7)%7)
		if s.After(t) { // a day that began late (a daylight-saving midnight)
			s = c.midnight(y, m, d-(int(l.Weekday())-c.Anchor+7)%7-7)
		}
		return s
	case Month:
		s := c.monthStart(y, m)
		if s.After(t) {
			s = c.monthStart(y, m-1)
		}
		return s
	}
	s := c.midnight(y, m, d)
	if s.After(t) {
		s = c.midnight(y, m, d-1)
	}
	return s
}

// Next returns the start of the window after the one starting at start
// (a Start of the calendar's).
func (c Calendar) Next(start time.Time) time.Time {
	l := start.In(c.loc())
	y, m, d := l.Date()
	switch c.Unit {
	case Week:
		return c.midnight(y, m, d+7)
	case Month:
		return c.monthStart(y, m+1)
	}
	return c.midnight(y, m, d+1)
}

// midnight is the first instant of the day y-m-d (normalised) in c's zone.
func (c Calendar) midnight(y int, m time.Month, d int) time.Time {
	return time.Date(y, m, d, 0, 0, 0, 0, c.loc())
}

// monthStart is the start of the window that begins in month y-m
// (normalised): on the anchor day, or on the month's last day if it has
// fewer days.
func (c Calendar) monthStart(y int, m time.Month) time.Time {
	first := time.Date(y, m, 1, 0, 0, 0, 0, c.loc())
	y, m, _ = first.Date()
	return c.midnight(y, m, min(c.anchor(), daysIn(y, m)))
}

// daysIn is the number of days of month m of year y.
func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 0, 0, 0, 0, time.UTC).Day()
}

// calendarWindows is a calendar's windows in nanoseconds, as a fixed
// window's hot path asks for them: the window holding an instant, and a
// window's end. The window last asked for is kept, so that every request
// but the first of each window is answered by two comparisons.
type calendarWindows struct {
	cal  Calendar
	last atomic.Pointer[[2]int64] // [start, end) of the window last computed
}

func newCalendarWindows(c Calendar) *calendarWindows { return &calendarWindows{cal: c} }

// window returns the window [start, end) holding now (ns).
func (w *calendarWindows) window(now int64) (start, end int64) {
	if s := w.last.Load(); s != nil && now >= s[0] && now < s[1] {
		return s[0], s[1]
	}
	st := w.cal.Start(time.Unix(0, now))
	start, end = st.UnixNano(), w.cal.Next(st).UnixNano()
	w.last.Store(&[2]int64{start, end})
	return start, end
}

// start returns the start of the window holding now (ns).
func (w *calendarWindows) start(now int64) int64 {
	start, _ := w.window(now)
	return start
}

// end returns the end of the window starting at start (ns).
func (w *calendarWindows) end(start int64) int64 {
	if s := w.last.Load(); s != nil && s[0] == start {
		return s[1]
	}
	_, end := w.window(start)
	return end
}

// sameCalendar reports whether two fixed windows' calendars count the same
// windows (nil: aligned to the Unix epoch).
func sameCalendar(a, b *calendarWindows) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.cal.Equal(b.cal)
}
