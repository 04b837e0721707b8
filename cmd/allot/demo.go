package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/bits"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/lease/rules"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/sim"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const demoAbout = `
Runs the whole system in this process, on loopback: a 3-member coordinator
cluster (real Raft, bolt stores in a temporary directory removed at exit)
and gateway agents, then drives skewed, sticky traffic from two tenants on
different plans and shows, refreshed in place, each node's lease and
admitted rate, the fleet against each limit, and what was refused and why.
Halfway through it kills the Raft leader. At the end it checks the figures
and the billing ledger against the agents' own counts, and exits 1 if any
check fails.`

// demoRules is the demo's rule file: a global capacity rule shared by
// weight, a per-tenant plan quota, and a per-user abuse limit.
const demoRules = `
rules:
  - name: api-capacity
    description: What the API tier serves in total; pro weighs 3, free 1.
    scope: global
    algorithm: token_bucket
    limit: 5000
    period: 1s
    burst: 1000
    intent: capacity
    plans:
      free: {weight: 1, rank: 0}
      pro: {weight: 3, rank: 1}
  - name: plan-quota
    description: Requests per second each plan pays for.
    scope: tenant
    algorithm: token_bucket
    limit: 300
    period: 1s
    intent: quota
    plans:
      free: {limit: 300}
      pro: {limit: 1500}
  - name: per-user
    description: One user's runaway script must not eat the tenant's quota.
    scope: user
    algorithm: gcra
    limit: 50
    period: 1s
    burst: 10
    intent: abuse
`

// demoSlack is how far under its quota a tenant's last second must be for
// a refusal to count as wrongful (the simulator, in virtual time, uses 1%).
const demoSlack = 0.02

// demoTenant is one tenant's traffic: its plan, its offered rate, the
// nodes its connections land on (weights, sticky and skewed), and its
// users.
type demoTenant struct {
	name, plan string
	rate       float64   // offered requests per second
	weights    []float64 // per node; zero for nodes it never reaches
	users      int
	// runaway, when set, is one user sending this many requests per
	// second on top of the rest, to one node.
	runaway     float64
	runawayNode int
	quota       int64 // the plan's quota, per second

	// Counted by the tenant's driver goroutine; read by the screen.
	admitted, denied atomic.Int64
	byRule           sync.Map // rule name → *atomic.Int64 refusals
	wrongful         atomic.Int64
	steadyQuotaDeny  atomic.Int64   // refused by plan-quota after the warm-up
	perNode          []atomic.Int64 // admitted per node
	steadyAdmitted   atomic.Int64   // admitted after the warm-up
	trail            *trailing
}

// demoNode is one gateway.
type demoNode struct {
	id    string
	agent *agent.Agent
}

// demo is one run.
type demo struct {
	out      io.Writer
	tty      bool
	duration time.Duration
	warmup   time.Duration
	dir      string
	log      hclog.Logger
	logFile  *os.File

	coords   []*coordinator.Coordinator
	alive    [3]atomic.Bool // read by the screen while failover writes
	nodes    []*demoNode
	tenants  []*demoTenant
	capacity int64 // the api-capacity rule's limit, per second
	lat      latency
	start    time.Time
	// steadyRequests counts requests after the warm-up.
	steadyRequests atomic.Int64

	mu      sync.Mutex
	events  []string
	killAt  time.Time
	elected time.Time
	newLead string
	oldLead string
}

func runDemo(ctx context.Context, e *env) error {
	f := newFlags(e, "demo", "[--duration D] [--nodes N] [--no-tty]", demoAbout)
	var (
		duration time.Duration
		nodes    int
		noTTY    bool
	)
	f.DurationVar(&duration, "duration", 30*time.Second, "how long to drive traffic (at least 10s)")
	f.IntVar(&nodes, "nodes", 8, "gateway agents (3 to 64)")
	f.BoolVar(&noTTY, "no-tty", false, "print plain lines instead of refreshing the screen (for logs and CI)")
	if err := f.parse(e); err != nil {
		return err
	}
	if err := f.noArgs(); err != nil {
		return err
	}
	if duration < 10*time.Second {
		return usagef("demo", "--duration %v: want at least 10s", duration)
	}
	if nodes < 3 || nodes > 64 {
		return usagef("demo", "--nodes %d: want 3 to 64", nodes)
	}
	dir, err := os.MkdirTemp("", "allot-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	logFile, err := os.Create(filepath.Join(dir, "demo.log"))
	if err != nil {
		return err
	}
	defer logFile.Close()
	d := &demo{
		out: &syncWriter{w: e.stdout}, tty: !noTTY && isTerminal(e.stdout), duration: duration, warmup: 5 * time.Second, dir: dir,
		log:     hclog.New(&hclog.LoggerOptions{Name: "allot", Level: hclog.Info, Output: logFile}),
		logFile: logFile,
	}
	err = d.run(ctx, nodes)
	if err != nil && !errors.Is(err, context.Canceled) {
		d.tailLog(e.stderr)
	}
	return err
}

func (d *demo) run(ctx context.Context, nodes int) error {
	defer d.stopCoordinators()
	fmt.Fprintf(d.out, "allot demo: starting a 3-member coordinator cluster and %d gateways on loopback (data in %s)\n", nodes, d.dir)
	if err := d.startCluster(ctx); err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	set, err := rules.Parse("demo-rules.yaml", []byte(demoRules))
	if err != nil {
		return err
	}
	if err := d.putRules(ctx, set); err != nil {
		return fmt.Errorf("putting the rules: %w", err)
	}
	if err := d.startAgents(ctx, nodes); err != nil {
		return fmt.Errorf("starting the gateways: %w", err)
	}
	defer d.closeAgents()
	d.tenants, d.capacity = demoTraffic(nodes, set)
	fmt.Fprintf(d.out, "cluster up (leader %s); rules put through a follower; %d gateways ready. Driving traffic for %v…\n\n", d.leaderID(), nodes, d.duration)

	runCtx, cancel := context.WithTimeout(ctx, d.duration)
	defer cancel()
	d.start = time.Now()
	var wg sync.WaitGroup
	for _, t := range d.tenants {
		wg.Add(1)
		go func() { defer wg.Done(); d.drive(runCtx, t) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-runCtx.Done():
		case <-time.After(d.duration / 2):
			d.failover(runCtx)
		}
	}()
	d.screen(runCtx)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.summary(ctx)
}

// startCluster starts three coordinators: the first bootstraps, the others
// join it.
func (d *demo) startCluster(ctx context.Context) error {
	for i := 0; i < 3; i++ {
		cfg := coordinator.Config{
			NodeID: fmt.Sprintf("c%d", i+1), DataDir: filepath.Join(d.dir, fmt.Sprintf("c%d", i+1)), Region: "demo",
			RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0",
			HeartbeatTimeout: 500 * time.Millisecond, ElectionTimeout: 500 * time.Millisecond,
			Logger: d.log.Named(fmt.Sprintf("c%d", i+1)), Registerer: prometheus.NewRegistry(),
		}
		if i == 0 {
			cfg.Bootstrap = true
		} else {
			cfg.Join = []string{d.coords[0].GRPCAddr()}
		}
		c, err := coordinator.New(cfg)
		if err != nil {
			return err
		}
		d.coords = append(d.coords, c)
		d.alive[i].Store(true)
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = c.WaitLeader(wctx)
		cancel()
		if err != nil {
			return err
		}
	}
	return poll(ctx, 30*time.Second, func() bool {
		for _, c := range d.coords {
			if len(c.Status().GetMembers()) != 3 {
				return false
			}
		}
		return true
	})
}

// poll checks cond every 20 ms until it holds or the timeout passes.
func poll(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waited %v: %w", timeout, ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// putRules writes the rules through a follower, which forwards them to
// the leader, as an operator's `allot rules put` may.
func (d *demo) putRules(ctx context.Context, set []rules.Rule) error {
	addr := d.coords[0].GRPCAddr()
	for _, c := range d.coords {
		if !c.IsLeader() {
			addr = c.GRPCAddr()
			break
		}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer cc.Close()
	req := putRequest(set, true)
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = allotpb.NewRulesServiceClient(cc).PutRules(cctx, req)
	return err
}

func (d *demo) startAgents(ctx context.Context, n int) error {
	var addrs []string
	for _, c := range d.coords {
		addrs = append(addrs, c.GRPCAddr())
	}
	for i := 0; i < n; i++ {
		reg := prometheus.NewRegistry()
		id := fmt.Sprintf("gw-%d", i+1)
		a, err := agent.New(agent.Config{Coordinators: addrs, NodeID: id, Region: "demo", Logger: d.log.Named(id), Registerer: reg})
		if err != nil {
			return err
		}
		d.nodes = append(d.nodes, &demoNode{id: id, agent: a})
	}
	for _, nd := range d.nodes {
		select {
		case <-nd.agent.Ready():
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(30 * time.Second):
			return fmt.Errorf("%s got no rules in 30s", nd.id)
		}
	}
	return nil
}

// demoTraffic is the demo's load: acme (pro) at 1.5 times its quota,
// its connections on three gateways, 70/20/10; globex (free) under its
// quota on the last three gateways, plus one user's runaway script (which
// the per-user rule refuses; the quota is checked first, so what the
// script offers counts against it until then). Quotas and the capacity
// are read from the rules.
func demoTraffic(nodes int, set []rules.Rule) (tenants []*demoTenant, capacity int64) {
	var quota rules.Rule
	for _, r := range set {
		switch r.Name {
		case "plan-quota":
			quota = r
		case "api-capacity":
			capacity = r.Limit
		}
	}
	acme := &demoTenant{name: "acme", plan: "pro", users: 200, quota: quota.LimitFor("acme", "pro"), weights: make([]float64, nodes)}
	acme.rate = 1.5 * float64(acme.quota)
	acme.weights[0], acme.weights[1], acme.weights[2] = 0.7, 0.2, 0.1
	globex := &demoTenant{name: "globex", plan: "free", users: 100, quota: quota.LimitFor("globex", "free"), weights: make([]float64, nodes),
		runawayNode: nodes - 1}
	globex.rate, globex.runaway = float64(globex.quota)/2, float64(globex.quota)/3
	for i := nodes - 3; i < nodes; i++ {
		globex.weights[i] = 1
	}
	for _, t := range []*demoTenant{acme, globex} {
		t.perNode = make([]atomic.Int64, nodes)
		t.trail = newTrailing(time.Second, 100)
	}
	return []*demoTenant{acme, globex}, capacity
}

// drive sends a tenant's requests at its rate until ctx ends, every
// millisecond sending what is due, to the node its connection landed on.
func (d *demo) drive(ctx context.Context, t *demoTenant) {
	rng := rand.New(rand.NewPCG(uint64(len(t.name)), 42))
	cum := make([]float64, len(t.weights))
	sum := 0.0
	for i, w := range t.weights {
		sum += w
		cum[i] = sum
	}
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	sent, sentRunaway := 0.0, 0.0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		elapsed := time.Since(d.start)
		for due := elapsed.Seconds() * t.rate; sent < due; sent++ {
			x := rng.Float64() * sum
			node := 0
			for node < len(cum)-1 && cum[node] < x {
				node++
			}
			d.send(t, node, fmt.Sprintf("user-%d", rng.IntN(t.users)), elapsed)
		}
		for due := elapsed.Seconds() * t.runaway; sentRunaway < due; sentRunaway++ {
			d.send(t, t.runawayNode, "script-7", elapsed)
		}
	}
}

func (d *demo) send(t *demoTenant, node int, user string, elapsed time.Duration) {
	a := d.nodes[node].agent
	begin := time.Now()
	dec := a.Check(agent.Request{Tenant: t.name, Plan: t.plan, User: user, Route: "/search"})
	d.lat.observe(time.Since(begin))
	now := time.Now()
	if elapsed >= d.warmup {
		d.steadyRequests.Add(1)
	}
	if dec.Allowed {
		t.admitted.Add(1)
		t.perNode[node].Add(1)
		t.trail.add(now)
		if elapsed >= d.warmup {
			t.steadyAdmitted.Add(1)
		}
		return
	}
	t.denied.Add(1)
	c, _ := t.byRule.LoadOrStore(dec.Rule, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	if dec.Rule != "plan-quota" || elapsed < d.warmup {
		return
	}
	t.steadyQuotaDeny.Add(1)
	// A quota refusal while the fleet admitted less than the quota in the
	// last second is wrongful: the customer paid for it. The count is
	// taken on the wall clock, after the check, from a driver that sends
	// in millisecond ticks: at exactly the quota it wanders by about 1.5%,
	// so only a shortfall beyond demoSlack counts.
	if float64(t.trail.count(now)) < (1-demoSlack)*float64(t.quota) {
		t.wrongful.Add(1)
	}
}

// failover closes the Raft leader, as if its process were killed, and
// waits for the others to elect a new one.
func (d *demo) failover(ctx context.Context) {
	idx := -1
	for i, c := range d.coords {
		if d.alive[i].Load() && c.IsLeader() {
			idx = i
		}
	}
	if idx < 0 {
		d.event("no leader to kill")
		return
	}
	d.mu.Lock()
	d.killAt, d.oldLead = time.Now(), d.coords[idx].ID()
	d.alive[idx].Store(false)
	d.mu.Unlock()
	d.event(fmt.Sprintf("killing the Raft leader %s", d.coords[idx].ID()))
	go func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = d.coords[idx].Close(cctx)
	}()
	err := poll(ctx, 30*time.Second, func() bool {
		for i, c := range d.coords {
			if i != idx && c.IsLeader() {
				d.mu.Lock()
				d.elected, d.newLead = time.Now(), c.ID()
				d.mu.Unlock()
				return true
			}
		}
		return false
	})
	if err != nil {
		d.event("no new leader: " + err.Error())
		return
	}
	d.mu.Lock()
	pause := d.elected.Sub(d.killAt)
	d.mu.Unlock()
	d.event(fmt.Sprintf("%s elected leader after %v; it learns for one lease period before re-dividing", d.leaderID(), pause.Round(time.Millisecond)))
}

func (d *demo) event(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	line := fmt.Sprintf("[%5.1fs] %s", time.Since(d.start).Seconds(), s)
	d.events = append(d.events, line)
	if !d.tty {
		fmt.Fprintln(d.out, line)
	}
}

func (d *demo) leaderID() string {
	for i, c := range d.coords {
		if d.alive[i].Load() && c.IsLeader() {
			return c.ID()
		}
	}
	return "none"
}

// screen shows the fleet once a second until ctx ends.
func (d *demo) screen(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	prev := d.snapshot()
	lines := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cur := d.snapshot()
		if d.tty {
			text := d.render(prev, cur)
			if lines > 0 {
				fmt.Fprintf(d.out, "\033[%dA\033[J", lines)
			}
			fmt.Fprint(d.out, text)
			lines = strings.Count(text, "\n")
		} else {
			fmt.Fprint(d.out, d.renderLine(prev, cur))
		}
		prev = cur
	}
}

// snap is the counters at one moment.
type snap struct {
	at       time.Time
	admitted [][]int64 // tenant, node
	denied   []int64
}

func (d *demo) snapshot() snap {
	s := snap{at: time.Now()}
	for _, t := range d.tenants {
		row := make([]int64, len(t.perNode))
		for i := range row {
			row[i] = t.perNode[i].Load()
		}
		s.admitted = append(s.admitted, row)
		s.denied = append(s.denied, t.denied.Load())
	}
	return s
}

func (d *demo) render(prev, cur snap) string {
	var b strings.Builder
	secs := cur.at.Sub(prev.at).Seconds()
	fmt.Fprintf(&b, "t=%4.0fs  leader %-4s  checks: p99 < %v, max %v\n\n", cur.at.Sub(d.start).Seconds(), d.leaderID(), d.lat.quantile(0.99), d.lat.max().Round(time.Microsecond))
	fmt.Fprintf(&b, "%-7s %24s %24s\n", "gateway", "acme (pro) lease  rate/s", "globex (free) lease  rate/s")
	for i, nd := range d.nodes {
		fmt.Fprintf(&b, "%-7s", nd.id)
		for ti, t := range d.tenants {
			lease := nd.agent.Share("plan-quota", t.name)
			rate := float64(cur.admitted[ti][i]-prev.admitted[ti][i]) / secs
			fmt.Fprintf(&b, " %15.0f %8.0f", lease, rate)
		}
		fmt.Fprintln(&b)
	}
	fmt.Fprintln(&b)
	total := 0.0
	for ti, t := range d.tenants {
		rate := float64(sum(cur.admitted[ti])-sum(prev.admitted[ti])) / secs
		total += rate
		fmt.Fprintf(&b, "%-7s admitted %6.0f/s of plan-quota %5d/s (%5.1f%%)   refused: %s\n", t.name, rate, t.quota, 100*rate/float64(t.quota), refusals(t))
	}
	fmt.Fprintf(&b, "fleet   admitted %6.0f/s of api-capacity %d/s (%5.1f%%)\n\n", total, d.capacity, 100*total/float64(d.capacity))
	d.mu.Lock()
	for _, ev := range d.events {
		fmt.Fprintln(&b, ev)
	}
	d.mu.Unlock()
	return b.String()
}

func (d *demo) renderLine(prev, cur snap) string {
	secs := cur.at.Sub(prev.at).Seconds()
	var parts []string
	for ti, t := range d.tenants {
		rate := float64(sum(cur.admitted[ti])-sum(prev.admitted[ti])) / secs
		parts = append(parts, fmt.Sprintf("%s %.0f/s of %d (%.1f%%)", t.name, rate, t.quota, 100*rate/float64(t.quota)))
	}
	return fmt.Sprintf("[%5.1fs] leader %s; %s; refused %s\n", cur.at.Sub(d.start).Seconds(), d.leaderID(), strings.Join(parts, ", "), refusals(d.tenants...))
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// refusals summarises refusals by rule.
func refusals(ts ...*demoTenant) string {
	counts := map[string]int64{}
	for _, t := range ts {
		t.byRule.Range(func(k, v any) bool {
			counts[k.(string)] += v.(*atomic.Int64).Load()
			return true
		})
	}
	if len(counts) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d by %s", counts[k], k))
	}
	return strings.Join(parts, ", ")
}

// summary closes the gateways (each flushes its usage), reads the ledger
// back, and checks everything the demo promises.
func (d *demo) summary(ctx context.Context) error {
	elapsed := time.Since(d.start)
	if err := d.closeAgents(); err != nil {
		return fmt.Errorf("closing the gateways: %w", err)
	}
	ledger, err := d.readLedger(ctx)
	if err != nil {
		return fmt.Errorf("reading the ledger: %w", err)
	}
	var checks []check
	w := d.out
	fmt.Fprintf(w, "\n── summary after %v ──\n", elapsed.Round(time.Second))
	steady := (elapsed - d.warmup).Seconds()
	for _, t := range d.tenants {
		ratio := float64(t.steadyAdmitted.Load()) / (float64(t.quota) * steady)
		offered := t.rate + t.runaway
		fmt.Fprintf(w, "%-7s offered %.0f/s; admitted %.1f%% of its plan-quota (%d/s) after the first %v; refused %s\n",
			t.name, offered, 100*ratio, t.quota, d.warmup, refusals(t))
	}
	acme, globex := d.tenants[0], d.tenants[1]
	acmeRatio := float64(acme.steadyAdmitted.Load()) / (float64(acme.quota) * steady)
	checks = append(checks, check{fmt.Sprintf("acme, offered 1.5× its quota, admitted %.1f%% of it (want 95–105%%)", 100*acmeRatio), acmeRatio >= 0.95 && acmeRatio <= 1.05})
	wrong := acme.wrongful.Load() + globex.wrongful.Load()
	reqs := d.steadyRequests.Load()
	checks = append(checks, check{fmt.Sprintf("wrongful quota denials (refused while the tenant's fleet-wide admissions in the last second were %.0f%% or more under its quota): %d of %d requests after the first %v (%.4f%%; want ≤ 0.1%%)", 100*demoSlack, wrong, reqs, d.warmup, 100*float64(wrong)/float64(max(reqs, 1))), float64(wrong) <= 0.001*float64(reqs)})
	gq := globex.steadyQuotaDeny.Load()
	checks = append(checks, check{fmt.Sprintf("globex, under its quota, refused by plan-quota %d times after the first %v (want 0); its runaway user refused by per-user %d times", gq, d.warmup, globex.refusedBy("per-user")), gq == 0 && globex.refusedBy("per-user") > 0})
	capRatio := float64(acme.steadyAdmitted.Load()+globex.steadyAdmitted.Load()) / (float64(d.capacity) * steady)
	fmt.Fprintf(w, "fleet   admitted %.1f%% of api-capacity (%d/s), which never bound\n", 100*capRatio, d.capacity)

	d.mu.Lock()
	pause, killed, elected := d.elected.Sub(d.killAt), !d.killAt.IsZero(), !d.elected.IsZero()
	d.mu.Unlock()
	checks = append(checks, check{fmt.Sprintf("leader %s killed at half time; %s elected %v later: the coordinators' pause, while gateways kept deciding locally", d.oldLead, d.newLead, pause.Round(time.Millisecond)), killed && elected})
	p99, p999, worst := d.lat.quantile(0.99), d.lat.quantile(0.999), d.lat.max()
	// A check that waited on the coordinators would have taken as long as
	// the failover: the slowest must be far below it.
	checks = append(checks, check{fmt.Sprintf("requests never paused: the slowest of %d checks took %v (p99 < %v, p99.9 < %v), while the coordinators paused %v", d.lat.count(), worst.Round(time.Microsecond), p99, p999, pause.Round(time.Millisecond)), worst < 50*time.Millisecond && worst < pause/10})

	for _, t := range d.tenants {
		for _, r := range []string{"api-capacity", "plan-quota", "per-user"} {
			want := usageCount{admitted: uint64(t.admitted.Load()), denied: uint64(t.refusedBy(r))}
			got := ledger[[2]string{t.name, r}]
			checks = append(checks, check{fmt.Sprintf("ledger %s/%s: admitted %d, denied %d; the agents counted %d and %d", t.name, r, got.admitted, got.denied, want.admitted, want.denied), got == want})
		}
	}
	failed := 0
	fmt.Fprintln(w)
	for _, c := range checks {
		mark := "ok  "
		if !c.ok {
			mark = "FAIL"
			failed++
		}
		fmt.Fprintf(w, "%s %s\n", mark, c.what)
	}
	if failed > 0 {
		return fmt.Errorf("%w: %d of %d", errChecksFailed, failed, len(checks))
	}
	fmt.Fprintf(w, "\nall %d checks passed\n", len(checks))
	return nil
}

type check struct {
	what string
	ok   bool
}

type usageCount struct{ admitted, denied uint64 }

func (t *demoTenant) refusedBy(rule string) int64 {
	if c, ok := t.byRule.Load(rule); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

// readLedger sums the replicated ledger per tenant and rule, from the
// leader, which has applied everything it acknowledged (a follower may
// still be a few entries behind).
func (d *demo) readLedger(ctx context.Context) (map[[2]string]usageCount, error) {
	var addr string
	for i, c := range d.coords {
		if d.alive[i].Load() && (addr == "" || c.IsLeader()) {
			addr = c.GRPCAddr()
		}
	}
	q := &allotpb.UsageQuery{From: timestamppb.New(d.start.Add(-2 * time.Hour)), To: timestamppb.New(time.Now().Add(2 * time.Hour))}
	lines, err := fetchLedger(ctx, &clientFlags{coordinators: addr, timeout: 10 * time.Second}, q, 0)
	if err != nil {
		return nil, err
	}
	out := map[[2]string]usageCount{}
	for _, l := range lines {
		k := [2]string{l.tenant, l.rule}
		c := out[k]
		c.admitted += l.admitted
		c.denied += l.denied
		out[k] = c
	}
	return out, nil
}

// closeAgents closes every gateway once, flushing its usage.
func (d *demo) closeAgents() error {
	var errs []error
	for _, nd := range d.nodes {
		if nd.agent == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := nd.agent.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", nd.id, err))
		}
		cancel()
		nd.agent = nil
	}
	return errors.Join(errs...)
}

func (d *demo) stopCoordinators() {
	for i, c := range d.coords {
		if d.alive[i].Load() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = c.Close(ctx)
			cancel()
			d.alive[i].Store(false)
		}
	}
}

// tailLog prints the end of the cluster's log, for a run that failed.
func (d *demo) tailLog(w io.Writer) {
	data, err := os.ReadFile(d.logFile.Name())
	if err != nil || len(data) == 0 {
		return
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	fmt.Fprintln(w, "last lines of the cluster's log:")
	for _, l := range lines[max(0, len(lines)-30):] {
		fmt.Fprintln(w, "  "+l)
	}
}

// syncWriter serialises the screen's and the events' writes.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// trailing counts a tenant's admissions over the last second, on the wall
// clock, for several goroutines.
type trailing struct {
	mu sync.Mutex
	t  *sim.Trailing
}

func newTrailing(period time.Duration, n int) *trailing {
	return &trailing{t: sim.NewTrailing(period, n)}
}

func (t *trailing) add(at time.Time) {
	t.mu.Lock()
	t.t.Add(time.Duration(at.UnixNano()))
	t.mu.Unlock()
}

func (t *trailing) count(at time.Time) int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.t.Count(time.Duration(at.UnixNano()))
}

// latency is a histogram of check times in power-of-two nanosecond
// buckets, safe for concurrent use.
type latency struct {
	buckets [40]atomic.Int64
	worst   atomic.Int64
}

func (l *latency) observe(d time.Duration) {
	ns := max(int64(d), 1)
	l.buckets[min(63-bits.LeadingZeros64(uint64(ns)), len(l.buckets)-1)].Add(1)
	for {
		w := l.worst.Load()
		if ns <= w || l.worst.CompareAndSwap(w, ns) {
			return
		}
	}
}

func (l *latency) count() int64 {
	var n int64
	for i := range l.buckets {
		n += l.buckets[i].Load()
	}
	return n
}

// quantile is the upper bound of the bucket holding quantile q.
func (l *latency) quantile(q float64) time.Duration {
	total := l.count()
	if total == 0 {
		return 0
	}
	want := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i := range l.buckets {
		seen += l.buckets[i].Load()
		if seen >= want {
			return time.Duration(int64(1) << (i + 1))
		}
	}
	return l.max()
}

func (l *latency) max() time.Duration { return time.Duration(l.worst.Load()) }
