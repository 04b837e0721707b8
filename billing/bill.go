package billing

import (
	"cmp"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/allot-io/allot/ledger"
	"github.com/allot-io/allot/rules"
)

// LedgerLine is one line of one cluster's ledger, and what billing must
// know of where it was read: which cluster, and the rule as that cluster
// knows it.
type LedgerLine struct {
	ledger.Line
	// Source is which cluster the line came from, counted from 0 in the
	// order the caller read them: the first that knows a rule defines it.
	Source int
	// Def is the rule as that cluster knows it; nil when it no longer
	// has the rule, and then the line's allowance is unknown.
	Def *rules.Rule
}

// Line is one line of a bill: one region's usage, or the total over the
// regions (Total, Region AllRegions).
type Line struct {
	Start, End   time.Time
	Final        bool
	Tenant, Rule string
	Region       string
	Total        bool
	Admitted     uint64
	Denied       uint64
	// Overage is the part of Admitted past the limit in force (a quota
	// with overage); on a total line, the regions' sum.
	Overage uint64
	// Share is a region's part of what its tenant, rule and window
	// admitted over all regions; nil with one region or nothing admitted.
	Share *big.Rat
	// Shares lists every region's share, on a total line.
	Shares []RegionShare
	// Fraction is the rule's fraction for the region ("" if the rule does
	// not divide by region); Allowance what the line was allowed (nil when
	// unknown).
	Fraction  string
	Allowance *big.Rat
	// Granted is, for a region leasing from a parent, the units of the
	// allowance the parent leased it over the window; on a total line,
	// their sum. Nil when none was recorded.
	Granted *float64
	// Terms are the tenant's cycle the window belongs to and the limit
	// in force, as the ledger recorded them; on a total line, the
	// regions' when they all recorded the same, else none.
	Terms ledger.Terms
}

// RegionShare is one region's share of a total line's admitted units.
type RegionShare struct {
	Region string
	Share  *big.Rat
}

// AllRegions is the region of a total line.
const AllRegions = "*"

// CountedTwiceError is a ledger line that two clusters both counted:
// adding both would bill it twice. Lines are the two, in source order.
type CountedTwiceError struct {
	Lines [2]LedgerLine
}

func (e *CountedTwiceError) Error() string {
	a, b := e.Lines[0], e.Lines[1]
	return fmt.Sprintf("tenant %s, rule %s, region %s, window %s was counted by two clusters (#%d and #%d)",
		a.Tenant, a.Rule, a.Region, a.Start().Format(time.RFC3339), a.Source+1, b.Source+1)
}

// Merge merges the ledgers of several clusters into one bill, sorted by
// window, tenant, rule and region, with a total line after the regions
// of each tenant, rule and window that more than one region contributed
// to. A line counted by two clusters is a *CountedTwiceError.
func Merge(lines []LedgerLine) ([]Line, error) {
	lines = slices.Clone(lines)
	// By window start and length (windows of different lengths, from
	// clusters that bill differently, are billed apart), then tenant,
	// rule and region as the ledger orders them, then source.
	slices.SortFunc(lines, func(a, b LedgerLine) int {
		return cmp.Or(cmp.Compare(a.Window, b.Window), cmp.Compare(a.WindowSeconds, b.WindowSeconds), cmp.Compare(a.Tenant, b.Tenant),
			cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Region, b.Region), cmp.Compare(a.Source, b.Source))
	})
	var bill []Line
	for i := 0; i < len(lines); {
		j := i + 1
		for j < len(lines) && sameGroup(lines[i], lines[j]) {
			j++
		}
		group := lines[i:j]
		for k := 1; k < len(group); k++ {
			if a, b := group[k-1], group[k]; a.Region == b.Region {
				return nil, &CountedTwiceError{Lines: [2]LedgerLine{a, b}}
			}
		}
		bill = append(bill, billGroup(group)...)
		i = j
	}
	return bill, nil
}

func sameGroup(a, b LedgerLine) bool {
	return a.Window == b.Window && a.WindowSeconds == b.WindowSeconds && a.Tenant == b.Tenant && a.Rule == b.Rule
}

// billGroup bills one tenant, rule and window: a line per region, and a
// total when there are several.
func billGroup(group []LedgerLine) []Line {
	var admitted, denied, overage uint64
	final := true
	var def *rules.Rule
	for _, l := range group {
		admitted += l.Admitted
		denied += l.Denied
		overage += l.Overage
		final = final && l.Final
		if def == nil {
			def = l.Def // the first cluster, in source order, that knows the rule
		}
	}
	multi := len(group) > 1
	out := make([]Line, 0, len(group)+1)
	var granted *float64
	var shares []RegionShare
	terms := group[0].Terms
	for _, l := range group {
		if l.Terms != terms {
			terms = ledger.Terms{}
		}
		b := Line{Start: l.Start(), End: l.End(), Final: l.Final, Tenant: l.Tenant, Rule: l.Rule, Region: l.Region,
			Admitted: l.Admitted, Denied: l.Denied, Overage: l.Overage, Granted: l.Granted, Terms: l.Terms}
		if l.Granted != nil {
			sum := *l.Granted
			if granted != nil {
				sum += *granted
			}
			granted = &sum
		}
		b.Fraction, b.Allowance = regionPart(l.Def, l.Region, allowance(l.Def, l.Tenant, l.End().Sub(l.Start())))
		if multi && admitted > 0 {
			b.Share = new(big.Rat).SetFrac(new(big.Int).SetUint64(l.Admitted), new(big.Int).SetUint64(admitted))
			shares = append(shares, RegionShare{l.Region, b.Share})
		}
		out = append(out, b)
	}
	if multi {
		first := group[0]
		out = append(out, Line{Start: first.Start(), End: first.End(), Final: final, Tenant: first.Tenant, Rule: first.Rule,
			Region: AllRegions, Total: true, Admitted: admitted, Denied: denied, Overage: overage, Shares: shares,
			Allowance: allowance(def, first.Tenant, first.End().Sub(first.Start())), Granted: granted, Terms: terms})
	}
	return out
}

// allowance is a rule's allowance for a tenant over a window; nil, unknown,
// when the cluster no longer has the rule.
func allowance(def *rules.Rule, tenant string, w time.Duration) *big.Rat {
	if def == nil {
		return nil
	}
	return def.Allowance(tenant, w)
}

// regionPart is a region's part of an allowance; a rule the cluster no
// longer has divides nothing.
func regionPart(def *rules.Rule, region string, whole *big.Rat) (string, *big.Rat) {
	if def == nil {
		return "", whole
	}
	return def.RegionPart(region, whole)
}
