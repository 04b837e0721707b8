package allocator

import (
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestLeaseOfNothing: what a grant too small to be a share becomes in the
// lease a node is sent. For a node that holds a lease or has spent, the
// smallest lease there is ("nothing more"); for a node holding nothing,
// none (it keeps its unleased share, as a node not funded yet does), never
// a limit of 1e-14 that the node's algorithm refuses to take.
func TestLeaseOfNothing(t *testing.T) {
	a := New(Config{Region: "eu", ReportInterval: time.Second})
	for _, tc := range []struct {
		name               string
		alg                algo.Algorithm
		grant, held, spent float64
		want, wantNext     float64
	}{
		{"rounding, holding nothing", algo.GCRA, 1.42e-14, 0, 0, 0, 0},
		{"rounding, holding a lease", algo.GCRA, 1.42e-14, 50, 0, minLease, 0},
		{"a share", algo.GCRA, 12.5, 0, 0, 12.5, 0},
		{"a window, nothing more after spending", algo.FixedWindow, 0, 0, 3, minLease, minLease},
		{"a window, holding nothing", algo.FixedWindow, 1e-15, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &rules.Rule{Name: "api", Scope: rules.Tenant, Algorithm: tc.alg, Limit: 100, Period: time.Second, Intent: lease.Capacity}
			p := &pool{key: poolKey{"api", "acme"}, rule: r, limit: 100}
			c := &class{key: classKey{tenant: "acme"}}
			cl := &claim{grant: tc.grant, held: tc.held, committed: tc.spent, seq: 1}
			l := a.leaseFor(p, c, cl, 1, 0)
			if l.GetLimit() != tc.want || l.GetNextLimit() != tc.wantNext {
				t.Fatalf("grant %g (held %g, spent %g): lease %g next %g; want %g next %g", tc.grant, tc.held, tc.spent, l.GetLimit(), l.GetNextLimit(), tc.want, tc.wantNext)
			}
		})
	}
}
