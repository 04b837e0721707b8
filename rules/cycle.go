package rules

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/allot-io/allot/algo"
	"go.yaml.in/yaml/v3"
)

// Cycle counts a fixed_window quota on the calendar, as plans are sold:
// "100,000 calls a month" renewed on the 17th at midnight in the customer's
// time zone. A rule file writes it as a calendar period and, optionally,
// where the cycle starts:
//
//	period: month
//	cycle: {anchor_day: 17, time_zone: Europe/Berlin}
//
// The rule's Period is then the unit's nominal length (a month is 720h):
// rates and demand estimates are computed from it, while windows follow
// the calendar (algo.Calendar).
type Cycle struct {
	// Unit is day, week or month: the rule file's period.
	Unit   algo.CalendarUnit `yaml:"-" json:"unit"`
	Anchor `yaml:",inline"`

	// loc is TimeZone loaded, by whoever made the cycle from a rule file
	// or the wire (Resolve), so that the windows of every report need not
	// load it again.
	loc *time.Location
}

// Resolve loads the cycle's time zone once, for Calendar. It is for the
// code that makes a Cycle, before the Cycle is shared: Calendar on a cycle
// not resolved loads the zone at each call.
func (c *Cycle) Resolve() {
	if loc, err := time.LoadLocation(c.TimeZone); err == nil {
		c.loc = loc
	}
}

// Anchor is where a calendar period's cycles start: the rule's own, or a
// plan's or a tenant's (a customer who signed up on the 17th in New York
// renews on the 17th at midnight there). A zero Anchor is the 1st, in UTC,
// for the rule's; for a plan or a tenant, none of its own.
type Anchor struct {
	// AnchorDay is, for a month, the day its cycle starts (1–31; the 31st
	// renews on a shorter month's last day). 0 is the 1st.
	AnchorDay int `yaml:"anchor_day,omitempty" json:"anchor_day,omitempty"`
	// TimeZone is the IANA zone whose midnights start the cycle; empty is
	// UTC.
	TimeZone string `yaml:"time_zone,omitempty" json:"time_zone,omitempty"`
}

// IsZero reports whether the anchor sets nothing.
func (a Anchor) IsZero() bool { return a == Anchor{} }

// CycleFor returns the cycle a tenant on a plan counts in: the rule's
// period, anchored by the tenant's override from the API (o, when ok and
// it sets a cycle), else by the entry whose limit the tenant has: the
// rule file's tenants entry (which replaces the plan's, cycle included),
// else its plan's, else the rule's own. nil for a rule not on the
// calendar.
func (r *Rule) CycleFor(o TenantOverride, ok bool, tenant, plan string) *Cycle {
	if r.Cycle == nil || r.Cycle.Unit == 0 {
		return nil
	}
	return r.anchored(r.AnchorFor(o, ok, tenant, plan))
}

// AnchorFor is the anchor of the cycle CycleFor returns, zero for the
// rule's own (or for a rule not on the calendar), without loading its
// time zone: for a caller that keeps the anchored rules it has made
// (Anchored), since loading a zone reads it from disk (30 µs).
func (r *Rule) AnchorFor(o TenantOverride, ok bool, tenant, plan string) Anchor {
	if r.Cycle == nil || r.Cycle.Unit == 0 {
		return Anchor{}
	}
	var a Anchor
	if t, in := r.Tenants[tenant]; in && t.Limit > 0 {
		a = t.Cycle
	} else if p, in := r.Plans[plan]; in {
		a = p.Cycle
	}
	if ok && !o.Cycle.IsZero() {
		a = o.Cycle
	}
	return a
}

// CycleAt returns the tenant's cycle of the rule holding at, [start,
// end): its calendar window (CycleFor) for a rule counted on the
// calendar, else its period's window from the Unix epoch. The one place a
// tenant's cycle is computed, for what is reported and kept per cycle
// (balances, notices).
func (r *Rule) CycleAt(o TenantOverride, ok bool, tenant, plan string, at time.Time) (start, end time.Time) {
	if c := r.CycleFor(o, ok, tenant, plan); c != nil {
		cal := c.Calendar()
		start = cal.Start(at)
		return start, cal.Next(start)
	}
	if r.Period <= 0 {
		return at, at
	}
	start = r.WindowStart(at)
	return start, start.Add(r.Period)
}

// anchored is the rule's cycle anchored by a, or the rule's own for none.
func (r *Rule) anchored(a Anchor) *Cycle {
	if a.IsZero() || r.Cycle == nil || r.Cycle.Unit == 0 {
		return r.Cycle
	}
	c := &Cycle{Unit: r.Cycle.Unit, Anchor: a}
	c.Resolve()
	return c
}

// Anchored is the rule counting in its cycle anchored by a (a plan's or a
// tenant's), or the rule itself when a changes nothing.
func (r *Rule) Anchored(a Anchor) *Rule {
	c := r.anchored(a)
	if c == r.Cycle {
		return r
	}
	d := *r
	d.Cycle = c
	return &d
}

// validateAnchor checks a plan's or a tenant's anchor (field names the
// anchor) on rule r.
func (r *Rule) validateAnchor(a Anchor, field string, bad func(string, string, ...any)) {
	if a.IsZero() {
		return
	}
	if r.Cycle == nil || r.Cycle.Unit == 0 {
		bad(field, "anchors a calendar period, and the rule counts none: set its period to day, week or month")
		return
	}
	c := Cycle{Unit: r.Cycle.Unit, Anchor: a}
	c.validateAnchor(strings.TrimSuffix(field, "cycle"), bad)
}

// calendarUnits are the periods a rule file may name instead of a duration.
var calendarUnits = map[string]algo.CalendarUnit{"day": algo.Day, "week": algo.Week, "month": algo.Month}

// ParseCalendarUnit parses day, week or month.
func ParseCalendarUnit(s string) (algo.CalendarUnit, error) {
	if u, ok := calendarUnits[s]; ok {
		return u, nil
	}
	return 0, fmt.Errorf("unknown calendar period %q (want day, week or month)", s)
}

// Calendar returns the windows the cycle counts. Its time zone must load
// (Validate checks it); one that does not counts in UTC.
func (c *Cycle) Calendar() algo.Calendar {
	cal := algo.Calendar{Unit: c.Unit, Anchor: c.AnchorDay}
	if c.Unit == algo.Week {
		cal.Anchor = int(time.Monday)
	}
	switch loc, err := c.loc, error(nil); {
	case loc != nil:
		cal.Location = loc
	default:
		if loc, err = time.LoadLocation(c.TimeZone); err == nil {
			cal.Location = loc
		}
	}
	return cal
}

// validate checks the cycle of a rule whose algorithm is alg, and reports
// whether it found nothing wrong.
func (c *Cycle) validate(alg algo.Algorithm, period time.Duration, bad func(string, string, ...any)) bool {
	ok := true
	bad0 := bad
	bad = func(field, format string, args ...any) { ok = false; bad0(field, format, args...) }
	if c.Unit == 0 {
		bad("cycle", "applies to a calendar period: set period to day, week or month")
		return false
	}
	if alg != algo.FixedWindow && alg != 0 {
		bad("period", "%s counts windows on the calendar, which only fixed_window can (%s needs windows of one length)", c.Unit, alg)
	}
	if period != c.Unit.Nominal() {
		bad("period", "a %s's period is its nominal %v, got %v", c.Unit, c.Unit.Nominal(), period)
	}
	c.validateAnchor("", bad)
	return ok
}

// validateAnchor checks the cycle's anchor; prefix is what its fields'
// names start with ("" for the rule's own, "plans.pro." for a plan's).
func (c *Cycle) validateAnchor(prefix string, bad func(string, string, ...any)) {
	switch {
	case c.AnchorDay != 0 && c.Unit != algo.Month:
		bad(prefix+"cycle.anchor_day", "applies to a monthly period; a %s starts at midnight%s", c.Unit, map[bool]string{true: " on Monday"}[c.Unit == algo.Week])
	case c.AnchorDay < 0 || c.AnchorDay > 31:
		bad(prefix+"cycle.anchor_day", "must be a day of the month from 1 to 31, got %d", c.AnchorDay)
	}
	if c.TimeZone != "" {
		if _, err := time.LoadLocation(c.TimeZone); err != nil {
			bad(prefix+"cycle.time_zone", "unknown time zone %q (want an IANA name such as Europe/Berlin)", c.TimeZone)
		}
	}
}

// equalCycles reports whether two rules' cycles are the same.
func equalCycles(a, b *Cycle) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Unit == b.Unit && a.Anchor == b.Anchor
}

// calendarPeriods finds the rules whose period a rule file gives as a
// calendar unit (period: month), and returns data with each such period
// written as the unit's nominal duration, in the same number of bytes, so
// that the strict decoder, which decodes a period as a time.Duration and
// whose line numbers every error cites, reads the file unchanged
// otherwise. units holds each such rule's unit, by its index.
func calendarPeriods(root *yaml.Node, data []byte) (out []byte, units map[int]algo.CalendarUnit) {
	list := rulesList(root)
	if list == nil {
		return data, nil
	}
	out = data
	for i, rule := range list.Content {
		if rule.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(rule.Content); j += 2 {
			k, v := rule.Content[j], rule.Content[j+1]
			if k.Value != "period" || v.Kind != yaml.ScalarNode {
				continue
			}
			u, ok := calendarUnits[v.Value]
			if !ok {
				continue
			}
			at, ok := offset(data, v.Line, v.Column)
			if !ok {
				continue
			}
			token := v.Value // the scalar as written, with its quotes
			switch {
			case v.Style&yaml.DoubleQuotedStyle != 0:
				token = `"` + token + `"`
			case v.Style&yaml.SingleQuotedStyle != 0:
				token = "'" + token + "'"
			}
			if !bytes.HasPrefix(data[at:], []byte(token)) {
				continue // written otherwise: the decoder will say what is wrong
			}
			if units == nil {
				out = bytes.Clone(data)
				units = map[int]algo.CalendarUnit{}
			}
			// "720h" is no longer than "month", and blanks after a plain
			// scalar are not part of it.
			nominal := strconv.FormatInt(int64(u.Nominal()/time.Hour), 10) + "h"
			copy(out[at:], fmt.Sprintf("%-*s", len(token), nominal))
			units[i] = u
		}
	}
	return out, units
}

// rulesList is the rules: sequence of a rule file's root, or nil.
func rulesList(root *yaml.Node) *yaml.Node {
	doc := root
	if doc != nil && doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc == nil || doc.Kind != yaml.MappingNode {
		return nil
	}
	for j := 0; j+1 < len(doc.Content); j += 2 {
		if doc.Content[j].Value == "rules" && doc.Content[j+1].Kind == yaml.SequenceNode {
			return doc.Content[j+1]
		}
	}
	return nil
}

// offset is the byte offset of a 1-based line and column (yaml.v3 counts
// columns in runes).
func offset(data []byte, line, col int) (int, bool) {
	at := 0
	for l := 1; l < line; l++ {
		i := bytes.IndexByte(data[at:], '\n')
		if i < 0 {
			return 0, false
		}
		at += i + 1
	}
	for c := 1; c < col; c++ {
		if at >= len(data) || data[at] == '\n' {
			return 0, false
		}
		_, size := utf8.DecodeRune(data[at:])
		at += size
	}
	return at, at < len(data)
}
