package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/internal/fleet"
)

// checkReq is the sidecar's POST /v1/check body (sidecar.CheckRequest),
// written by the harness itself.
type checkReq struct {
	Tenant   string `json:"tenant"`
	Plan     string `json:"plan,omitempty"`
	User     string `json:"user,omitempty"`
	Route    string `json:"route,omitempty"`
	IP       string `json:"ip,omitempty"`
	Priority string `json:"priority,omitempty"`
	Cost     *int64 `json:"cost,omitempty"`
	// settle, when set, sends the request to /v1/reserve at Cost, and an
	// admitted one is settled at *settle (POST /v1/settle): it counts for
	// the settled cost.
	settle *int64
}

// units is what the request counts for if decided: its cost, where absent
// means 1 (agent.Check) and an explicit 0 is a peek, which spends and
// bills nothing.
func (c *checkReq) units() uint64 {
	switch {
	case c.Cost == nil:
		return 1
	case *c.Cost <= 0:
		return 0
	}
	return uint64(*c.Cost)
}

// u128 counts units without wrapping: costs up to 2^63 add up past 2^64.
type u128 struct{ hi, lo uint64 }

func (a *u128) add(x uint64) {
	var carry uint64
	a.lo, carry = bits.Add64(a.lo, x, 0)
	a.hi += carry
}

func (a *u128) addU(b u128) {
	var carry uint64
	a.lo, carry = bits.Add64(a.lo, b.lo, 0)
	a.hi += b.hi + carry
}

// units is what one tenant or node admitted and denied under one rule.
type units struct{ adm, den u128 }

type tenantRule struct {
	tenant string
	rule   int
}

// tally is what the sidecars answered, as one worker saw it: units per
// tenant and rule, units per sidecar and rule, and request counts.
type tally struct {
	byTenant map[tenantRule]*units
	byNode   [][]units // [sidecar][rule]
	stats    stats
	notes    []string // anomalies, for the log
}

type stats struct {
	sent, admitted, denied, rejected, errors, anomalies, settles int64
}

func (s *stats) add(o stats) {
	s.sent += o.sent
	s.admitted += o.admitted
	s.settles += o.settles
	s.denied += o.denied
	s.rejected += o.rejected
	s.errors += o.errors
	s.anomalies += o.anomalies
}

func newTally(nodes, rules int) *tally {
	t := &tally{byTenant: map[tenantRule]*units{}, byNode: make([][]units, nodes)}
	for i := range t.byNode {
		t.byNode[i] = make([]units, rules)
	}
	return t
}

func (t *tally) at(tenant string, rule int) *units {
	k := tenantRule{tenant, rule}
	u := t.byTenant[k]
	if u == nil {
		u = &units{}
		t.byTenant[k] = u
	}
	return u
}

func (t *tally) merge(o *tally) {
	for k, u := range o.byTenant {
		m := t.at(k.tenant, k.rule)
		m.adm.addU(u.adm)
		m.den.addU(u.den)
	}
	for n := range o.byNode {
		for r := range o.byNode[n] {
			t.byNode[n][r].adm.addU(o.byNode[n][r].adm)
			t.byNode[n][r].den.addU(o.byNode[n][r].den)
		}
	}
	t.stats.add(o.stats)
	t.notes = append(t.notes, o.notes...)
}

func (t *tally) anomaly(format string, args ...any) {
	t.stats.anomalies++
	if len(t.notes) < 20 {
		t.notes = append(t.notes, fmt.Sprintf(format, args...))
	}
}

// checkAnswer is the part of the sidecar's answer the harness reads.
type checkAnswer struct {
	Allowed     bool   `json:"allowed"`
	Rule        string `json:"rule"`
	Reservation string `json:"reservation"`
}

// client sends checks and records the answers exactly as the sidecars
// gave them: a 200 admitted the cost under every rule the request matches
// (agent.Check charges every rule it passed), a 429 denied it under the one
// rule it names and no other; 400, 405, 413, other statuses and transport
// errors count for nothing.
type client struct {
	http     *http.Client
	sidecars []*fleet.Sidecar
	rules    *ruleSet
	// errors counts, as it happens, the checks that got a transport
	// error or an unexpected status (each tally has them too, for the
	// end): a phase compares it before and after. errNotes says what the
	// first of them were.
	errors   atomic.Int64
	mu       sync.Mutex
	errNotes []string
}

func newClient(sidecars []*fleet.Sidecar, rules *ruleSet, conns int) *client {
	// Idle connections are closed after 5 s, before the sidecars close
	// them (their idle timeout is their 10 s read timeout): a request
	// written onto a connection the server is closing fails, and a POST
	// is not retried.
	tr := &http.Transport{MaxIdleConns: 4 * conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: 5 * time.Second, DisableCompression: true}
	// Generous: a request that times out after the sidecar decided it
	// would be counted there and not here.
	return &client{http: &http.Client{Transport: tr, Timeout: 60 * time.Second}, sidecars: sidecars, rules: rules}
}

// expect is what a sidecar may do with a request.
type expect int

const (
	mustDecide expect = iota // 200 or 429: ordinary traffic
	mayRefuse                // hostile but well-formed: decided, or refused as invalid (400)
	mustRefuse               // malformed: 400, 405 or 413
)

// check sends one request. shadow is what the body means if the sidecar
// takes it (the harness counts it then, and notes the surprise when the
// body should have been refused).
func (c *client) check(ctx context.Context, t *tally, node int, method string, body []byte, shadow *checkReq, want expect) int {
	t.stats.sent++
	path := "/v1/check"
	if shadow != nil && shadow.settle != nil && want == mustDecide {
		path = "/v1/reserve"
	}
	req, err := http.NewRequestWithContext(ctx, method, c.sidecars[node].URL(path), bytes.NewReader(body))
	if err != nil {
		c.failed(t, node, err.Error())
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		c.failed(t, node, err.Error())
		return 0
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if err != nil {
		c.failed(t, node, "reading the answer: "+err.Error())
		return 0
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusTooManyRequests:
	case http.StatusBadRequest, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge:
		t.stats.rejected++
		if want == mustDecide {
			t.anomaly("%s: %d %s for a valid request %s", c.sidecars[node].ID, resp.StatusCode, bytes.TrimSpace(data), clip(string(body), 80))
		}
		return resp.StatusCode
	default:
		c.failed(t, node, fmt.Sprintf("%d %s", resp.StatusCode, clip(string(bytes.TrimSpace(data)), 120)))
		return resp.StatusCode
	}
	if want == mustRefuse {
		t.anomaly("%s: %d for a request that should be refused as malformed: %s", c.sidecars[node].ID, resp.StatusCode, clip(string(body), 80))
	}
	var ans checkAnswer
	if err := json.Unmarshal(data, &ans); err != nil || shadow == nil {
		t.anomaly("%s: %d with an unreadable answer %q: %v", c.sidecars[node].ID, resp.StatusCode, clip(string(data), 80), err)
		return resp.StatusCode
	}
	matched := c.rules.matching(shadow.Tenant, shadow.Plan, shadow.Route)
	n := shadow.units()
	if resp.StatusCode == http.StatusOK && path == "/v1/reserve" && ans.Reservation != "" {
		n = c.settle(ctx, t, node, ans.Reservation, n, uint64(*shadow.settle))
	}
	if resp.StatusCode == http.StatusOK {
		t.stats.admitted++
		if ans.Rule == "" {
			// The agent admits everything, uncounted, until it has rules.
			if matched != 0 {
				t.anomaly("%s: admitted by no rule though rules match: %s", c.sidecars[node].ID, clip(string(body), 80))
			}
			return resp.StatusCode
		}
		if i, ok := c.rules.index[ans.Rule]; !ok || matched&(1<<i) == 0 {
			t.anomaly("%s: admitted with rule %q, which the request does not match", c.sidecars[node].ID, ans.Rule)
		}
		for i := range c.rules.defs {
			if matched&(1<<i) != 0 {
				t.at(shadow.Tenant, i).adm.add(n)
				t.byNode[node][i].adm.add(n)
			}
		}
		return resp.StatusCode
	}
	t.stats.denied++
	i, ok := c.rules.index[ans.Rule]
	if !ok {
		t.anomaly("%s: denied by unknown rule %q", c.sidecars[node].ID, ans.Rule)
		return resp.StatusCode
	}
	if matched&(1<<i) == 0 {
		t.anomaly("%s: denied by rule %q, which the request does not match", c.sidecars[node].ID, ans.Rule)
	}
	t.at(shadow.Tenant, i).den.add(n)
	t.byNode[node][i].den.add(n)
	return resp.StatusCode
}

// failed counts a check sent to sidecar node that got no answer the
// harness can count, and keeps what happened for the first ten.
func (c *client) failed(t *tally, node int, what string) {
	t.stats.errors++
	c.errors.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errNotes) < 10 {
		c.errNotes = append(c.errNotes, fmt.Sprintf("%s %s: %s", time.Now().UTC().Format("15:04:05.000"), c.sidecars[node].ID, what))
	}
}

// errorNotes are the first failed checks, as failed noted them.
func (c *client) errorNotes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.errNotes)
}

// settle settles a reservation at actual and returns what the request
// counts for: actual when the sidecar settled it, estimate when the
// settle failed (the reservation is then settled at its estimate, when
// its TTL runs out or the sidecar closes).
func (c *client) settle(ctx context.Context, t *tally, node int, id string, estimate, actual uint64) uint64 {
	t.stats.settles++
	body := fmt.Sprintf(`{"reservation":%q,"cost":%d}`, id, actual)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.sidecars[node].URL("/v1/settle"), strings.NewReader(body))
	if err != nil {
		c.failed(t, node, err.Error())
		return estimate
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		t.anomaly("%s: settling %s: %v (counted at its estimate)", c.sidecars[node].ID, id, err)
		return estimate
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.anomaly("%s: settling %s: %d %s", c.sidecars[node].ID, id, resp.StatusCode, clip(string(bytes.TrimSpace(data)), 120))
		return estimate
	}
	return actual
}

func (c *client) send(ctx context.Context, t *tally, node int, r *checkReq) int {
	body, err := json.Marshal(r)
	if err != nil {
		t.anomaly("encoding a request: %v", err)
		return 0
	}
	return c.check(ctx, t, node, http.MethodPost, body, r, mustDecide)
}

// load is the traffic: workers sending a mix of steady tenants, a stream
// of new tenants (each sending for a while after it arrives), users,
// routes, priorities and costs, at a bounded rate and count.
type load struct {
	cfg     *config
	cl      *client
	budget  atomic.Int64 // requests left
	newSeq  atomic.Int64 // new tenants so far
	flood   atomic.Int64 // checks left in a flood of brand-new tenants
	stop    chan struct{}
	wg      sync.WaitGroup
	tallies []*tally
}

func startLoad(ctx context.Context, cfg *config, cl *client) *load {
	l := &load{cfg: cfg, cl: cl, stop: make(chan struct{})}
	l.budget.Store(cfg.maxRequests)
	for w := range cfg.workers {
		t := newTally(len(cl.sidecars), len(cl.rules.defs))
		l.tallies = append(l.tallies, t)
		rng := rand.New(rand.NewPCG(cfg.seed, uint64(w)))
		l.wg.Go(func() { l.worker(ctx, rng, t) })
	}
	return l
}

// finish stops the traffic, waits for the requests in flight, and returns
// everything the workers saw.
func (l *load) finish() *tally {
	close(l.stop)
	l.wg.Wait()
	all := newTally(len(l.cl.sidecars), len(l.cl.rules.defs))
	for _, t := range l.tallies {
		all.merge(t)
	}
	return all
}

func (l *load) worker(ctx context.Context, rng *rand.Rand, t *tally) {
	every := time.Duration(float64(time.Second) * float64(l.cfg.workers) / float64(l.cfg.rate))
	next := time.Now()
	for l.budget.Add(-1) >= 0 {
		select {
		case <-l.stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		if l.flood.Add(-1) >= 0 {
			// A flood: one check for each new tenant, as fast as it goes.
			r := l.request(rng)
			r.Tenant, r.Plan = newTenant(l.newSeq.Add(1))
			l.cl.send(ctx, t, rng.IntN(len(l.cl.sidecars)), r)
			next = time.Now()
			continue
		}
		l.cl.send(ctx, t, rng.IntN(len(l.cl.sidecars)), l.request(rng))
		next = next.Add(every)
		if d := time.Until(next); d > 0 {
			select {
			case <-time.After(d):
			case <-l.stop:
				return
			case <-ctx.Done():
				return
			}
		} else if d < -time.Second {
			next = time.Now() // fell behind: do not burst to catch up
		}
	}
}

// request draws one request.
func (l *load) request(rng *rand.Rand) *checkReq {
	r := &checkReq{}
	switch x := rng.Float64(); {
	case x < l.cfg.newTenantRate:
		seq := l.newSeq.Add(1)
		r.Tenant, r.Plan = newTenant(seq)
	case x < 0.45 && l.newSeq.Load() > 0:
		// A recent arrival, still sending: its counters straddle cuts,
		// most of all in its first report intervals.
		cur, span := l.newSeq.Load(), int64(400)
		if x < 0.25 {
			span = 30
		}
		r.Tenant, r.Plan = newTenant(cur - rng.Int64N(min(cur, span)))
	default:
		i := rng.IntN(rng.IntN(l.cfg.steadyTenants) + 1) // skewed to the first
		r.Tenant, r.Plan = fmt.Sprintf("steady-%02d", i), "free"
		if i%3 == 0 {
			r.Plan = "pro"
		}
	}
	r.User = "u" + strconv.Itoa(rng.IntN(6))
	if rng.IntN(20) == 0 {
		r.User = "bot" // hammers the per-user abuse rule
	}
	switch x := rng.IntN(100); {
	case x < 45:
		r.Route = "/v1/items/" + strconv.Itoa(rng.IntN(1000))
	case x < 70:
		r.Route = "/v1/search?q=" + strconv.Itoa(rng.IntN(50))
	case x < 82:
		r.Route = "/v1/export/csv"
	default:
		r.Route = "/v2/reports"
	}
	r.IP = "10.1.0." + strconv.Itoa(rng.IntN(40))
	if rng.IntN(30) == 0 {
		r.IP = "10.9.9.9"
	}
	r.Priority = []string{"", "", "", "", "", "", "batch", "critical", "exempt", "interactive"}[rng.IntN(10)]
	switch x := rng.IntN(100); {
	case x < 60:
	case x < 70:
		r.Cost = ptr(0)
	case x < 90:
		r.Cost = ptr(1 + rng.Int64N(5))
		if rng.IntN(4) == 0 {
			// Reserved at the cost, settled at 0 to 3 times it.
			r.settle = ptr(rng.Int64N(3**r.Cost + 1))
		}
	case x < 98:
		r.Cost = ptr(10)
	default:
		r.Cost = ptr(500) // more than most limits: never fits
	}
	return r
}

func newTenant(seq int64) (tenant, plan string) {
	plan = "free"
	if seq%5 == 0 {
		plan = "pro"
	}
	return fmt.Sprintf("new-%06d", seq), plan
}

func ptr(v int64) *int64 { return &v }

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("…(%d bytes)", len(s))
}
