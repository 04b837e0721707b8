package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/internal/fleet"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

const demoAbout = `
Runs the whole system on loopback: a 3-member coordinator cluster, three
'allot coordinator' processes started from this binary (real Raft, bolt
stores and logs in a temporary directory removed at exit), and gateway
agents in this process, then drives skewed, sticky traffic from two
tenants on different plans and shows, refreshed in place, each node's
lease and admitted rate, the fleet against each limit, and what was
refused and why. Halfway through it kills the Raft leader's process with
SIGKILL (no shutdown, no leadership transfer), times the election of a
new one, and restarts the killed member from its data directory. At the
end it checks the figures and the billing ledger against the agents' own
counts, and exits 1 if any check fails; a failed run shows the end of
every log.

It runs secured, as a deployment should: a throwaway CA in the temporary
directory signs each member's certificate (mutual TLS between members),
and the gateways and the demo's own calls use TLS and bearer tokens (an
agent token bound to the gateways' node IDs, an admin token).`

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
	// lateness is, per lagBucket of the traffic's time, the most any
	// request due in it was sent late (driver only).
	lateness []time.Duration
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

	cluster  *fleet.Cluster
	nodes    []*demoNode
	tenants  []*demoTenant
	capacity int64 // the api-capacity rule's limit, per second
	lat      latency
	lag      latency // how late the drivers sent each request
	stalls   stallWatch
	start    time.Time
	end      time.Time // when the traffic stopped
	// steadyRequests counts requests after the warm-up.
	steadyRequests atomic.Int64

	mu       sync.Mutex
	events   []string
	killAt   time.Time
	elected  time.Time
	newLead  string
	oldLead  string
	killed   *fleet.Coordinator // the member SIGKILLed and restarted
	rejoined time.Duration
	crashed  []string // members that exited without being killed
}

func demoCommand() *Command {
	return &Command{
		Name: "demo", Usage: "[--duration D] [--nodes N] [--no-tty] [--regions N]",
		Short: "run a 3-node cluster and 8 gateways on loopback, live",
		Long:  demoAbout, Flags: demoFlags,
	}
}

func demoFlags(f *flags) runFunc {
	var (
		duration time.Duration
		nodes    int
		noTTY    bool
		regions  int
	)
	f.DurationVar(&duration, "duration", 30*time.Second, "how long to drive traffic (at least 10s; with --regions, 12s a region by default)")
	f.IntVar(&nodes, "nodes", 8, "gateway agents (3 to 64)")
	f.BoolVar(&noTTY, "no-tty", false, "print plain lines instead of refreshing the screen (for logs and CI)")
	f.IntVar(&regions, "regions", 0, "instead, run a parent cluster and this many regions' clusters (2 to 5) in this process, two gateways each, with a tenant's traffic moving from region to region (docs/regions.md)")
	return func(ctx context.Context, e *env, args []string) error {
		if regions != 0 && (regions < 2 || regions > len(demoRegionNames)) {
			return usagef("demo", "--regions %d: want 2 to %d", regions, len(demoRegionNames))
		}
		if regions != 0 && !f.isSet("duration") {
			duration = time.Duration(regions) * 12 * time.Second
		}
		if duration < 10*time.Second {
			return usagef("demo", "--duration %v: want at least 10s", duration)
		}
		if nodes < 3 || nodes > 64 {
			return usagef("demo", "--nodes %d: want 3 to 64", nodes)
		}
		dir, err := os.MkdirTemp("", "allot-demo-")
		if err != nil {
			return fmt.Errorf("creating the demo's directory: %w", err)
		}
		defer os.RemoveAll(dir)
		logFile, err := os.Create(filepath.Join(dir, "gateways.log"))
		if err != nil {
			return fmt.Errorf("creating the gateways' log: %w", err)
		}
		defer logFile.Close()
		if regions > 0 {
			log := hclog.New(&hclog.LoggerOptions{Name: "allot", Level: hclog.Info, Output: logFile})
			err := runRegionsDemo(ctx, &syncWriter{w: e.stdout}, dir, log, regions, duration)
			if err != nil && !errors.Is(err, context.Canceled) {
				tailFile(e.stderr, "the clusters and gateways", logFile.Name(), 30)
			}
			return err
		}
		d := &demo{
			out: &syncWriter{w: e.stdout}, tty: !noTTY && isTerminal(e.stdout), duration: duration, warmup: 5 * time.Second, dir: dir,
			log:     hclog.New(&hclog.LoggerOptions{Name: "allot", Level: hclog.Info, Output: logFile}),
			logFile: logFile,
		}
		err = d.run(ctx, nodes)
		if err != nil && !errors.Is(err, context.Canceled) {
			d.tailLogs(e.stderr)
		}
		return err
	}
}

func (d *demo) run(ctx context.Context, nodes int) error {
	fmt.Fprintf(d.out, "allot demo: starting 3 coordinator processes and %d gateways on loopback (data and logs in %s)\n", nodes, d.dir)
	cluster, err := newDemoCluster(d.dir, func(co *fleet.Coordinator, err error) {
		d.mu.Lock()
		d.crashed = append(d.crashed, co.ID)
		d.mu.Unlock()
		d.event(fmt.Sprintf("coordinator %s exited by itself (%v); its log is %s", co.ID, err, co.LogPath))
	})
	if err != nil {
		return fmt.Errorf("setting up the cluster: %w", err)
	}
	fmt.Fprintln(d.out, describeSecurity(cluster.Creds))
	// Deferred first, so it runs last: every coordinator is killed on
	// every way out, after the gateways have flushed to them. There is
	// nothing a clean shutdown would keep: the demo's directory goes next.
	defer cluster.StopAll()
	d.cluster = cluster
	if err := cluster.Start(ctx); err != nil {
		return fmt.Errorf("starting the cluster: %w", err)
	}
	fmt.Fprintf(d.out, "coordinators: %s\n", describeCoordinators(cluster))
	set, err := rules.Parse("demo-rules.yaml", []byte(demoRules))
	if err != nil {
		return fmt.Errorf("the demo's rules: %w", err)
	}
	if err := d.putRules(ctx, set); err != nil {
		return fmt.Errorf("putting the rules: %w", err)
	}
	defer d.closeAgents()
	if err := d.startAgents(ctx, nodes); err != nil {
		return fmt.Errorf("starting the gateways: %w", err)
	}
	d.tenants, d.capacity = demoTraffic(nodes, set)
	fmt.Fprintf(d.out, "cluster up (leader %s); rules put through a follower; %d gateways ready in this process. Driving traffic for %v…\n\n", d.leaderID(ctx), nodes, d.duration)

	runCtx, cancel := context.WithTimeout(ctx, d.duration)
	defer cancel()
	// Under mu for event, which a coordinator's exit may call at any
	// time; the goroutines started below read it freely.
	d.mu.Lock()
	d.start = time.Now()
	d.mu.Unlock()
	var drivers, failover sync.WaitGroup
	for _, t := range d.tenants {
		drivers.Add(1)
		go func() { defer drivers.Done(); d.drive(runCtx, t) }()
	}
	// The failover runs on ctx, not runCtx: a short run may end its
	// traffic while the killed member is still catching up.
	failover.Add(1)
	go func() {
		defer failover.Done()
		select {
		case <-runCtx.Done():
		case <-time.After(d.duration / 2):
			d.failover(ctx)
		}
	}()
	go d.stalls.run(runCtx)
	d.screen(runCtx)
	drivers.Wait()
	d.end = time.Now()
	failover.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return d.summary(ctx)
}

// putRules writes the rules through a follower, which forwards them to
// the leader, as an operator's `allot rules put` may.
func (d *demo) putRules(ctx context.Context, set []rules.Rule) error {
	co := d.cluster.Follower(ctx)
	if co == nil {
		return errors.New("no follower answers")
	}
	cf := demoOperator(d.cluster.Creds, co.GRPC)
	cl, err := cf.dial()
	if err != nil {
		return fmt.Errorf("dialling %s: %w", co.ID, err)
	}
	defer cl.Close()
	req := putRequest(set, true)
	err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
		_, err := allotpb.NewRulesServiceClient(cc).PutRules(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("through %s: %w", co.ID, err)
	}
	return nil
}

func (d *demo) startAgents(ctx context.Context, n int) error {
	addrs := d.cluster.GRPCAddrs()
	for i := 0; i < n; i++ {
		reg := prometheus.NewRegistry()
		id := fmt.Sprintf("%s%d", demoNodePrefix, i+1)
		// TLS verified against the demo's CA, and the token that lets
		// the gateways report as gw-* only.
		a, err := agent.New(agent.Config{Coordinators: addrs, NodeID: id, Region: "demo", Logger: d.log.Named(id), Registerer: reg,
			CAFile: d.cluster.Creds.CA, TokenFile: d.cluster.Creds.Agents[demoAgentToken]})
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		d.nodes = append(d.nodes, &demoNode{id: id, agent: a})
	}
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for _, nd := range d.nodes {
		select {
		case <-nd.agent.Ready():
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout.C:
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
			d.send(t, node, fmt.Sprintf("user-%d", rng.IntN(t.users)), dueAt(sent, t.rate), elapsed)
		}
		for due := elapsed.Seconds() * t.runaway; sentRunaway < due; sentRunaway++ {
			d.send(t, t.runawayNode, "script-7", dueAt(sentRunaway, t.runaway), elapsed)
		}
	}
}

// dueAt is when, after the start, the nth request of a stream at rate per
// second is due.
func dueAt(n, rate float64) time.Duration { return time.Duration(n / rate * float64(time.Second)) }

// send makes one check. due is when the traffic's schedule has it, after
// the start; elapsed is when the driver woke to send it, later when the
// demo's process was not scheduled for a while.
func (d *demo) send(t *demoTenant, node int, user string, due, elapsed time.Duration) {
	a := d.nodes[node].agent
	begin := time.Now()
	dec := a.Check(agent.Request{Tenant: t.name, Plan: t.plan, User: user, Route: "/search"})
	end := time.Now()
	d.lat.observe(end.Sub(begin))
	d.stalls.check(begin, end)
	d.lag.observe(elapsed - due)
	t.late(due, elapsed-due)
	at := d.start.Add(due)
	if due >= d.warmup {
		d.steadyRequests.Add(1)
	}
	if dec.Allowed {
		t.admitted.Add(1)
		t.perNode[node].Add(1)
		t.trail.add(at)
		if due >= d.warmup {
			t.steadyAdmitted.Add(1)
		}
		return
	}
	t.denied.Add(1)
	c, _ := t.byRule.LoadOrStore(dec.Rule, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	if dec.Rule != "plan-quota" || due < d.warmup {
		return
	}
	t.steadyQuotaDeny.Add(1)
	// A quota refusal while the fleet admitted less than the quota in the
	// second before it is wrongful: the customer paid for it. Both are
	// placed in the traffic's own time, when each request was due, as
	// the customer's clients sent them: the wall clock would count the
	// demo's own scheduling. A driver that the machine did not run for
	// 100 ms sent that 100 ms of traffic at once when it ran again; on the
	// wall clock the second before it held 100 ms too few admissions, and
	// the catch-up's refusals (the gateways' buckets had filled by that
	// 100 ms, no more) counted as wrongful: 0.1–2.7% of requests on a
	// loaded machine. In the traffic's time the tokens the stall left
	// unspent are spent where they were due, nearly: the catch-up spends
	// them on its first requests, which were due early in the stall. A
	// second that starts inside a stall the driver caught up on L late
	// misses up to L's worth of admissions moved before it, and so many
	// fewer are expected. A fleet admitting less than its quota still
	// shows. Node choice is random, so each gateway's share of a second
	// wanders; only a shortfall beyond demoSlack counts.
	moved := float64(t.quota) * t.lateAt(due-time.Second).Seconds()
	if float64(t.trail.count(at)) < (1-demoSlack)*float64(t.quota)-moved {
		t.wrongful.Add(1)
	}
}

// failover SIGKILLs the Raft leader's process, times the election of a new
// leader by polling the survivors' own status, then restarts the killed
// member from its data directory and waits until it has rejoined as a
// follower and replayed everything committed while it was down.
func (d *demo) failover(ctx context.Context) {
	old, _ := d.cluster.Leader(ctx)
	if old == nil {
		d.event("no leader to kill")
		return
	}
	d.event(fmt.Sprintf("SIGKILL to the Raft leader %s (pid %d): no shutdown, no leadership transfer", old.ID, old.PID()))
	killAt := time.Now()
	if err := old.Kill(); err != nil {
		d.event("killing the leader: " + err.Error())
		return
	}
	d.mu.Lock()
	d.killAt, d.oldLead, d.killed = killAt, old.ID, old
	d.mu.Unlock()
	var lead *fleet.Coordinator
	err := d.cluster.Wait(ctx, 30*time.Second, "a new leader", func(ctx context.Context) (bool, string, error) {
		lead, _ = d.cluster.Leader(ctx)
		return lead != nil, "no member leads", nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return // interrupted: nothing to report
		}
		d.event("no new leader: " + err.Error())
		return
	}
	elected := time.Now()
	d.mu.Lock()
	d.elected, d.newLead = elected, lead.ID
	d.mu.Unlock()
	d.event(fmt.Sprintf("%s elected leader %v after the SIGKILL; it learns for one lease period before re-dividing", lead.ID, elected.Sub(killAt).Round(time.Millisecond)))

	// What the cluster committed while the member was down: it has
	// rejoined when it has applied that much, following the new leader.
	st, err := d.cluster.Status(ctx, lead)
	if err != nil {
		d.event("asking the new leader: " + err.Error())
		return
	}
	target := uint64(st.CommitIndex)
	restartAt := time.Now()
	if err := old.Start(); err != nil {
		d.event("restarting: " + err.Error())
		return
	}
	d.event(fmt.Sprintf("restarting %s from its data directory (pid %d)", old.ID, old.PID()))
	var applied uint64
	err = d.cluster.Wait(ctx, 30*time.Second, old.ID+" to rejoin", func(ctx context.Context) (bool, string, error) {
		st, err := d.cluster.Status(ctx, old)
		if err != nil {
			return false, err.Error(), nil
		}
		applied = uint64(st.AppliedIndex)
		return st.State == "Follower" && st.LeaderID != "" && applied >= target,
			fmt.Sprintf("state %s, leader %q, applied index %d of %d", st.State, st.LeaderID, applied, target), nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return // interrupted: nothing to report
		}
		d.event(fmt.Sprintf("%s did not rejoin: %v", old.ID, err))
		return
	}
	took := time.Since(restartAt)
	d.mu.Lock()
	d.rejoined = took
	d.mu.Unlock()
	d.event(fmt.Sprintf("%s rejoined as a follower %v after its restart, its log replayed to index %d", old.ID, took.Round(time.Millisecond), applied))
}

func (d *demo) event(s string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	line := "[ start] " + s
	if !d.start.IsZero() {
		line = fmt.Sprintf("[%5.1fs] %s", time.Since(d.start).Seconds(), s)
	}
	d.events = append(d.events, line)
	if !d.tty {
		fmt.Fprintln(d.out, line)
	}
}

// leaderID is the ID of the member that says it leads, or "none".
func (d *demo) leaderID(ctx context.Context) string {
	if co, _ := d.cluster.Leader(ctx); co != nil {
		return co.ID
	}
	return "none"
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

// tailLogs prints the end of every log, for a run that failed.
func (d *demo) tailLogs(w io.Writer) {
	tailFile(w, "the gateways", d.logFile.Name(), 20)
	if d.cluster != nil {
		tailCoordinatorLogs(w, d.cluster)
	}
}
