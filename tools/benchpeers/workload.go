package main

import (
	"math/rand"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// The workload every system gets: four token-bucket rules (global, tenant,
// tenant+user, tenant+route), 100 tenants, 100,000 users drawn Zipf(1.1),
// four routes. The same limits in Redis and in Allot.
const (
	users   = 100_000
	tenants = 100
)

type ruleSpec struct {
	name        string
	rate, burst float64 // per second
	key         func(r *request) string
	allotScope  string
}

var ruleSpecs = []ruleSpec{
	{name: "global", rate: 1_000_000, burst: 100_000, key: func(*request) string { return "g" }, allotScope: "global"},
	{name: "tenant", rate: 20_000, burst: 20_000, key: func(r *request) string { return "t:" + r.tenant }, allotScope: "tenant"},
	{name: "user", rate: 1_000, burst: 1_000, key: func(r *request) string { return "u:" + r.tenant + ":" + r.user }, allotScope: "user"},
	{name: "route", rate: 50_000, burst: 50_000, key: func(r *request) string { return "r:" + r.tenant + ":" + r.route }, allotScope: "route"},
}

// rulesYAML is ruleSpecs (the first n) as an Allot rules file.
func rulesYAML(n int) string { return rulesYAMLAt(n, 0) }

// admitAll is the rate and burst of the library's rules in its headline
// rows: a limit no benchmark reaches, so that every check is admitted and
// pays for being counted, as the checks a gateway serves do.
const admitAll = 900_000_000

// rulesYAMLAt is rulesYAML with every rule's rate and burst set to
// limit, when above 0.
func rulesYAMLAt(n int, limit float64) string {
	s := "rules:\n"
	for _, r := range ruleSpecs[:n] {
		rt, b := r.rate, r.burst
		if limit > 0 {
			rt, b = limit, limit
		}
		s += "  - {name: " + r.name + ", scope: " + r.allotScope + ", algorithm: token_bucket, limit: " +
			strconv.FormatFloat(rt, 'f', 0, 64) + ", period: 1s, burst: " + strconv.FormatFloat(b, 'f', 0, 64) + ", intent: capacity}\n"
	}
	return s
}

type request struct {
	tenant, user, route string
	body                []byte // the sidecar's JSON
}

// requests is the workload's draw: a sequence to cycle through.
type requests struct {
	all  []request
	next atomic.Uint64
}

var (
	workOnce sync.Once
	work     *requests
)

func workload() *requests {
	workOnce.Do(func() {
		r := rand.New(rand.NewSource(1))
		z := rand.NewZipf(r, 1.1, 1, users-1)
		perm := r.Perm(users)
		routes := []string{"/v1/search", "/v1/items", "/v1/orders", "/v1/users"}
		w := &requests{all: make([]request, 1<<18)}
		for i := range w.all {
			u := perm[z.Uint64()]
			q := request{tenant: "tenant-" + strconv.Itoa(u%tenants), user: "user-" + strconv.Itoa(u), route: routes[r.Intn(len(routes))]}
			q.body = []byte(`{"tenant":"` + q.tenant + `","user":"` + q.user + `","route":"` + q.route + `"}`)
			w.all[i] = q
		}
		work = w
	})
	return work
}

func (w *requests) take() *request {
	return &w.all[w.next.Add(1)%uint64(len(w.all))]
}

// latencies are one run's call times and outcomes.
type latencies struct {
	d                 []time.Duration
	admitted, refused int
	elapsed           time.Duration
}

func (l *latencies) quantile(q float64) time.Duration {
	if len(l.d) == 0 {
		return 0
	}
	s := slices.Clone(l.d)
	slices.Sort(s)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func (l *latencies) rate() float64 { return float64(len(l.d)) / l.elapsed.Seconds() }

// drive calls do from workers goroutines for d (or n calls when n > 0,
// one goroutine), recording each call's time and outcome.
func drive(workers int, d time.Duration, n int, do func(*request) (bool, error)) (*latencies, error) {
	w := workload()
	var mu sync.Mutex
	out := &latencies{}
	var firstErr error
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			var local latencies
			for i := 0; n <= 0 && time.Now().Before(deadline) || n > 0 && i < n; i++ {
				q := w.take()
				t0 := time.Now()
				ok, err := do(q)
				local.d = append(local.d, time.Since(t0))
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if ok {
					local.admitted++
				} else {
					local.refused++
				}
			}
			mu.Lock()
			out.d = append(out.d, local.d...)
			out.admitted += local.admitted
			out.refused += local.refused
			mu.Unlock()
		})
	}
	wg.Wait()
	out.elapsed = time.Since(start)
	return out, firstErr
}
