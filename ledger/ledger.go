package ledger

import (
	"cmp"
	"fmt"
	"strings"
	"time"
)

// Key is a ledger line's place in the ledger: a tenant's usage under one
// rule, in one region, in one billing window.
type Key struct {
	// Window is the billing window's start, Unix seconds.
	Window               int64
	Tenant, Rule, Region string
}

// CompareKeys orders keys as the ledger does: by window, then tenant,
// rule and region compared bytewise (as PostgreSQL's COLLATE "C" does).
// It returns -1, 0 or +1, as cmp.Compare does.
func CompareKeys(a, b Key) int {
	// Each part is compared only when the ones before are equal: the
	// state's B-tree calls this a dozen times per lookup, on keys that
	// mostly differ in their window or tenant.
	if c := cmp.Compare(a.Window, b.Window); c != 0 {
		return c
	}
	if c := strings.Compare(a.Tenant, b.Tenant); c != 0 {
		return c
	}
	if c := strings.Compare(a.Rule, b.Rule); c != 0 {
		return c
	}
	return strings.Compare(a.Region, b.Region)
}

// Start is the billing window's start, in UTC.
func (k Key) Start() time.Time { return time.Unix(k.Window, 0).UTC() }

func (k Key) String() string {
	return fmt.Sprintf("window %s tenant %q rule %q region %q",
		k.Start().Format(time.RFC3339), k.Tenant, k.Rule, k.Region)
}

// Line is one ledger line: its key, what was admitted and denied there,
// what a parent granted, and whether its window is final.
type Line struct {
	Key
	// WindowSeconds is the billing window's length.
	WindowSeconds    int64
	Admitted, Denied uint64
	// Overage is the part of Admitted past the limit in force, under a
	// quota with overage: what billing prices apart. It is part of
	// Admitted, not added to it: the units included in the plan are
	// Admitted − Overage.
	Overage uint64
	// Granted is what a parent leased the region of the tenant's
	// allowance over the window (docs/regions.md); nil when none was
	// recorded.
	Granted *float64
	// Final is set once the window has closed and every agent reporting
	// in it has been heard from past its end: its counts never change
	// again. Every line a sink holds is final.
	Final bool
	// Terms are the rule's terms for the tenant when its usage was
	// counted: the cycle the window belongs to and the limit in force.
	Terms
}

// Terms are what a tenant's usage in a line was counted against: the
// start of the tenant's cycle of the rule that the billing window belongs
// to, and the limit in force for the tenant. They are what turns a
// tenant's lines into an invoice ("acme's March cycle, against the limit
// it had"), recorded as the usage is counted because the rules and
// overrides they come from change after. A zero field was not recorded:
// a line from before they were, or of a rule that has no such terms for
// one tenant (the replicated state says which).
type Terms struct {
	// CycleStart is the cycle's start, Unix seconds.
	CycleStart int64
	// Limit is the limit in force for the tenant, in the rule's units per
	// cycle.
	Limit int64
}

// Cycle is the start of the cycle, in UTC; ok is false when none was
// recorded.
func (t Terms) Cycle() (start time.Time, ok bool) {
	if t.CycleStart == 0 {
		return time.Time{}, false
	}
	return time.Unix(t.CycleStart, 0).UTC(), true
}

// End is the billing window's end, in UTC.
func (l Line) End() time.Time { return time.Unix(l.Window+l.WindowSeconds, 0).UTC() }

// String writes the whole line: without it, a Line would print as its Key,
// whose String it would take.
func (l Line) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v (%d s): admitted %d, denied %d", l.Key, l.WindowSeconds, l.Admitted, l.Denied)
	if l.Overage != 0 {
		fmt.Fprintf(&b, ", overage %d", l.Overage)
	}
	if l.Granted != nil {
		fmt.Fprintf(&b, ", granted %g", *l.Granted)
	}
	if start, ok := l.Cycle(); ok {
		fmt.Fprintf(&b, ", cycle from %s", start.Format(time.RFC3339))
	}
	if l.Limit != 0 {
		fmt.Fprintf(&b, ", limit %d", l.Limit)
	}
	if l.Final {
		b.WriteString(", final")
	}
	return b.String()
}

// Position is how far a cluster has exported its ledger: every final line
// up to and including Last, when Set.
type Position struct {
	// Set is false before the first batch; Last is then the zero Key.
	Set bool
	// Last is the key of the last line exported.
	Last Key
	// Lines and Batches count what was exported so far.
	Lines, Batches uint64
}

// After reports whether p is past q: a position only moves forward, so
// one that is not After the position held is a repeat or an older
// writer's.
func (p Position) After(q Position) bool {
	if !p.Set {
		return false
	}
	return !q.Set || CompareKeys(p.Last, q.Last) > 0
}

// Same reports whether p and q are one position, as a sink's
// compare-and-set compares them: Set, Last and Lines (Batches is a
// statistic).
func (p Position) Same(q Position) bool {
	if p.Set != q.Set || p.Lines != q.Lines {
		return false
	}
	return !p.Set || p.Last == q.Last
}

// Advance is the position a batch of lines read after p leaves: its last
// line's key, and one more batch. lines must not be empty.
func (p Position) Advance(lines []Line) Position {
	return Position{Set: true, Last: lines[len(lines)-1].Key, Lines: p.Lines + uint64(len(lines)), Batches: p.Batches + 1}
}

func (p Position) String() string {
	if !p.Set {
		return fmt.Sprintf("nothing exported (%d lines, %d batches)", p.Lines, p.Batches)
	}
	return fmt.Sprintf("after %s (%d lines, %d batches)", p.Last, p.Lines, p.Batches)
}
