package agent

import (
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// callLimitRules are a user rule of 100/s by fixed window, another
// replaced by it, and an unlimited one.
func callLimitRules() []rules.Rule {
	user := rule("per-user", rules.Descriptor, algo.FixedWindow, 100, time.Second, lease.Quota)
	user.Match = rules.Match{Domain: "api", Descriptors: []rules.DescriptorEntry{{Key: "user"}}}
	user.Replaces = []string{"per-route"}
	route := rule("per-route", rules.Descriptor, algo.FixedWindow, 2, time.Second, lease.Quota)
	route.Match = rules.Match{Domain: "api", Descriptors: []rules.DescriptorEntry{{Key: "route"}}}
	free := rules.Rule{Name: "internal", Scope: rules.Descriptor, Unlimited: true,
		Match: rules.Match{Domain: "api", Descriptors: []rules.DescriptorEntry{{Key: "internal"}}}}
	return []rules.Rule{user, route, free}
}

// TestCheckDescriptorsCallLimit: a descriptor's own limit replaces its
// rule's for its key, which is counted apart from the same key under the
// rule's limit or another; a limit of 0 refuses; an invalid one is no
// limit (the rule's applies, counted); a descriptor no rule applies to, or
// an unlimited rule, is admitted whatever its limit.
func TestCheckDescriptorsCallLimit(t *testing.T) {
	perMin := func(n int64) *Limit { return &Limit{Requests: n, Per: time.Minute} }
	for _, tc := range []struct {
		name     string
		entries  []Entry
		limit    *Limit
		checks   int
		admitted int    // of checks
		rule     string // of the last decision
		dlimit   int64
		period   time.Duration
		fallback int64 // allot_agent_call_limit_fallbacks_total{rule=per-user} after
	}{
		{"the rule's", []Entry{{"user", "ann"}}, nil, 120, 100, "per-user", 100, time.Second, 0},
		{"its own, lower", []Entry{{"user", "ann"}}, perMin(20), 30, 20, "per-user", 20, time.Minute, 0},
		{"its own, higher", []Entry{{"user", "ann"}}, &Limit{Requests: 150, Per: time.Second}, 200, 150, "per-user", 150, time.Second, 0},
		{"zero refuses", []Entry{{"user", "ann"}}, perMin(0), 3, 0, "per-user", 0, time.Minute, 0},
		{"negative is none", []Entry{{"user", "ann"}}, perMin(-1), 120, 100, "per-user", 100, time.Second, 120},
		{"no period is none", []Entry{{"user", "ann"}}, &Limit{Requests: 5}, 120, 100, "per-user", 100, time.Second, 120},
		{"beyond a century is none", []Entry{{"user", "ann"}}, &Limit{Requests: 5, Per: 101 * 365 * 24 * time.Hour}, 101, 100, "per-user", 100, time.Second, 101},
		{"no rule", []Entry{{"tenant", "acme"}}, perMin(1), 5, 5, "", 0, 0, 0},
		{"unlimited rule", []Entry{{"internal", "yes"}}, perMin(1), 5, 5, "internal", 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			a, err := New(Config{Rules: callLimitRules(), Clock: newManualClock(), Registerer: reg})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(t.Context())
			descs := []Descriptor{{Entries: tc.entries, Limit: tc.limit}}
			admitted := 0
			var last Decision
			for range tc.checks {
				last = a.CheckDescriptors("api", descs, 1, nil)[0]
				if last.Allowed {
					admitted++
				}
			}
			if admitted != tc.admitted || last.Rule != tc.rule || last.Limit != tc.dlimit || last.Period != tc.period {
				t.Fatalf("admitted %d of %d, last %+v; want %d, rule %q, %d per %v", admitted, tc.checks, last, tc.admitted, tc.rule, tc.dlimit, tc.period)
			}
			if got := gathered(t, reg, "allot_agent_call_limit_fallbacks_total", "per-user"); got != float64(tc.fallback) {
				t.Fatalf("allot_agent_call_limit_fallbacks_total = %v, want %d", got, tc.fallback)
			}
		})
	}
}

// TestCallLimitKeysApart: the same descriptor under its rule's limit and
// under two limits of its own is three keys, each spending its own limit,
// and a peek spends none of them.
func TestCallLimitKeysApart(t *testing.T) {
	a := standalone(t, newManualClock(), callLimitRules()...)
	ann := []Entry{{"user", "ann"}}
	spend := func(l *Limit, n int) (admitted int) {
		for range n {
			if a.CheckDescriptors("api", []Descriptor{{Entries: ann, Limit: l}}, 1, nil)[0].Allowed {
				admitted++
			}
		}
		return admitted
	}
	five, seven := &Limit{Requests: 5, Per: time.Minute}, &Limit{Requests: 7, Per: time.Minute}
	if d := a.CheckDescriptors("api", []Descriptor{{Entries: ann, Limit: five, Peek: true}}, 1, nil)[0]; !d.Allowed || d.Limit != 5 || d.Remaining != 5 {
		t.Fatalf("peek before: %+v", d)
	}
	if got := spend(five, 10); got != 5 {
		t.Fatalf("5/min admitted %d of 10", got)
	}
	if d := a.CheckDescriptors("api", []Descriptor{{Entries: ann, Limit: five, Peek: true}}, 1, nil)[0]; d.Allowed {
		t.Fatalf("peek after 5/min is spent: %+v", d)
	}
	if got := spend(seven, 10); got != 7 {
		t.Fatalf("7/min admitted %d of 10, after 5/min was spent", got)
	}
	if got := spend(nil, 110); got != 100 {
		t.Fatalf("the rule's 100/s admitted %d of 110", got)
	}
}

// TestCallLimitNeitherReplacesNorIsReplaced: as in envoyproxy/ratelimit,
// where a descriptor's limit has no name, a descriptor with one does not
// replace another's rule, nor is its rule replaced.
func TestCallLimitNeitherReplacesNorIsReplaced(t *testing.T) {
	a := standalone(t, newManualClock(), callLimitRules()...)
	user, route := []Entry{{"user", "ann"}}, []Entry{{"route", "/a"}}
	// Without limits, per-user replaces per-route: the route is admitted uncounted.
	for range 3 {
		d := a.CheckDescriptors("api", []Descriptor{{Entries: user}, {Entries: route}}, 1, nil)
		if !d[1].Allowed || d[1].Rule != "" {
			t.Fatalf("replaced per-route decided %+v", d[1])
		}
	}
	// The user's descriptor with a limit of its own replaces nothing:
	// per-route (2/s) counts the route.
	lim := &Limit{Requests: 50, Per: time.Second}
	var d []Decision
	for range 3 {
		d = a.CheckDescriptors("api", []Descriptor{{Entries: user, Limit: lim}, {Entries: route}}, 1, nil)
	}
	if d[1].Allowed || d[1].Rule != "per-route" || !d[0].Allowed || d[0].Limit != 50 {
		t.Fatalf("third request: %+v; want the user admitted at 50/s and the route refused by per-route", d)
	}
}

// TestCallLimitStoresBounded: past MaxCallLimits limits, a new one is
// decided by the rule's own limit and counted; the limits seen keep
// theirs.
func TestCallLimitStoresBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := New(Config{Rules: callLimitRules(), Clock: newManualClock(), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(t.Context())
	for i := range MaxCallLimits {
		l := &Limit{Requests: int64(1000 + i), Per: time.Minute}
		if d := a.CheckDescriptors("api", []Descriptor{{Entries: []Entry{{"user", strconv.Itoa(i)}}, Limit: l}}, 1, nil)[0]; d.Limit != l.Requests {
			t.Fatalf("limit %d decided as %+v", l.Requests, d)
		}
	}
	d := a.CheckDescriptors("api", []Descriptor{{Entries: []Entry{{"user", "late"}}, Limit: &Limit{Requests: 3, Per: time.Minute}}}, 1, nil)[0]
	if d.Limit != 100 || d.Period != time.Second {
		t.Fatalf("a limit past the bound decided as %+v; want the rule's 100/s", d)
	}
	if d := a.CheckDescriptors("api", []Descriptor{{Entries: []Entry{{"user", "0"}}, Limit: &Limit{Requests: 1000, Per: time.Minute}}}, 1, nil)[0]; d.Limit != 1000 {
		t.Fatalf("a limit seen before the bound decided as %+v", d)
	}
	if got := gathered(t, reg, "allot_agent_call_limit_fallbacks_total", "per-user"); got != 1 {
		t.Fatalf("allot_agent_call_limit_fallbacks_total = %v, want 1", got)
	}
}

// TestCallLimitTakesTheRulesAlgorithm: a limit the rule's algorithm cannot
// take (a sliding window counts at most 2^32-1 a window) is the rule's.
func TestCallLimitTakesTheRulesAlgorithm(t *testing.T) {
	r := rule("sw", rules.Descriptor, algo.SlidingWindow, 10, time.Second, lease.Quota)
	r.Match = rules.Match{Domain: "api", Descriptors: []rules.DescriptorEntry{{Key: "user"}}}
	a := standalone(t, newManualClock(), r)
	descs := []Descriptor{{Entries: []Entry{{"user", "ann"}}, Limit: &Limit{Requests: 1 << 40, Per: time.Second}}}
	d := a.CheckDescriptors("api", descs, 1, nil)[0]
	if d.Limit != 10 {
		t.Fatalf("decided %+v; want the rule's 10/s", d)
	}
	// Refused once, it is a lookup after: nothing is made or validated again.
	out := make([]Decision, 0, 1)
	if n := testing.AllocsPerRun(100, func() { out = a.CheckDescriptors("api", descs, 1, out[:0]) }); n != 0 {
		t.Errorf("a refused limit allocates %v times per check", n)
	}
}

// TestCheckDescriptorsCallLimitAllocatesNothing: a descriptor with a limit
// seen before allocates nothing, as one without (the first sight of a
// limit makes its store).
func TestCheckDescriptorsCallLimitAllocatesNothing(t *testing.T) {
	r := rule("per-ip", rules.Descriptor, algo.TokenBucket, 1_000_000, time.Second, lease.Abuse)
	r.Match = rules.Match{Domain: "edge", Descriptors: []rules.DescriptorEntry{{Key: "remote_address"}, {Key: "path", Value: "/api/*"}}}
	a := standalone(t, newManualClock(), r)
	descs := []Descriptor{{Entries: []Entry{{"remote_address", "10.0.0.1"}, {"path", "/api/items"}}, Limit: &Limit{Requests: 2_000_000, Per: time.Second}}}
	out := make([]Decision, 0, 1)
	if d := a.CheckDescriptors("edge", descs, 1, out); !d[0].Allowed || d[0].Limit != 2_000_000 {
		t.Fatalf("first check: %+v", d)
	}
	if n := testing.AllocsPerRun(1000, func() { out = a.CheckDescriptors("edge", descs, 1, out[:0]) }); n != 0 {
		t.Errorf("CheckDescriptors with a limit allocates %v times per call", n)
	}
	descs[0].Peek = true
	if n := testing.AllocsPerRun(1000, func() { out = a.CheckDescriptors("edge", descs, 1, out[:0]) }); n != 0 {
		t.Errorf("a peek with a limit allocates %v times per call", n)
	}
}

// BenchmarkCheckDescriptorsCallLimit: what a descriptor's own limit adds
// to deciding it, on one key seen before and on 10,000 keys (a store
// lookup and a hash mix).
//
//	go test -run '^$' -bench CheckDescriptorsCallLimit ./agent
func BenchmarkCheckDescriptorsCallLimit(b *testing.B) {
	r := rule("per-user", rules.Descriptor, algo.GCRA, 1_000_000_000, time.Second, lease.Capacity)
	r.Burst = 1_000_000
	r.Match = rules.Match{Domain: "api", Descriptors: []rules.DescriptorEntry{{Key: "user"}}}
	a := benchAgent(b, []rules.Rule{r})
	users := make([][]Entry, 10_000)
	for i := range users {
		users[i] = []Entry{{"user", "user-" + strconv.Itoa(i)}}
	}
	for _, lim := range []*Limit{nil, {Requests: 500_000_000, Per: time.Second}} {
		name := "limit=rule"
		if lim != nil {
			name = "limit=own"
		}
		for _, keys := range []int{1, len(users)} {
			b.Run(name+"/keys="+strconv.Itoa(keys), func(b *testing.B) {
				descs := make([]Descriptor, 1)
				out := make([]Decision, 0, 1)
				for i := range keys { // seen before
					descs[0] = Descriptor{Entries: users[i], Limit: lim}
					a.CheckDescriptors("api", descs, 1, out[:0])
				}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					descs[0] = Descriptor{Entries: users[i%keys], Limit: lim}
					out = a.CheckDescriptors("api", descs, 1, out[:0])
				}
			})
		}
	}
}
