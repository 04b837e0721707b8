package sim

import (
	"container/heap"
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/internal/agentdrive"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// quotaLease is Allot: a real agent.Agent on every node, reporting in
// virtual time to a real allocator.Engine (the coordinator's allocation
// and ledger, without Raft), over a network with the scenario's delay,
// jitter and loss.
type quotaLease struct {
	e *env
	// engines are the regions' clusters (one without regions); parent,
	// when the regions lease from one, the cluster above them.
	engines []*allocator.Engine
	parent  *allocator.Engine
	nodes   []*simNode
	// early is, per region, when each of its leader's early exchanges
	// with the parent under way ends.
	early  [][]time.Duration
	queue  eventQueue
	rng    *rand.Rand
	now    atomic.Int64 // virtual time since origin, read by the agents' clocks
	msgs   int64
	active int
	// sh, when the scenario has shards, carries reports through each
	// node's router to the shard groups (shards.go).
	sh *shardNet
}

// simNode is one gateway.
type simNode struct {
	id    int
	agent *agent.Agent
	// reports are the agent's reporting, which the simulator drives in
	// virtual time (internal/agentdrive).
	reports agentdrive.Reports
	clock   *simClock
	gone    bool
}

// simClock is a node's clock: the virtual time, plus the node's skew.
type simClock struct {
	q    *quotaLease
	skew atomic.Int64
}

func (c *simClock) Now() time.Time {
	return c.q.e.origin.Add(time.Duration(c.q.now.Load() + c.skew.Load()))
}

// errUnreachable is what an agent sees when its report does not arrive.
var errUnreachable = errors.New("sim: coordinator unreachable")

// newQuotaLease makes the strategy; with tier set (and regions) the
// regions' clusters lease from a parent.
func newQuotaLease(e *env, tier bool) (*quotaLease, error) {
	q := &quotaLease{e: e, rng: rand.New(rand.NewPCG(e.s.Seed, 77))}
	regions := 1
	if e.s.Regions != nil {
		regions = e.s.Regions.Count
	}
	for r := range regions {
		eng, err := allocator.NewEngine(allocator.EngineConfig{
			Region: q.regionName(r), Parent: tier, ReportInterval: e.s.Interval, Rules: []rules.Rule{e.rule},
		}, e.origin)
		if err != nil {
			return nil, err
		}
		q.engines = append(q.engines, eng)
	}
	if tier {
		var err error
		if q.parent, err = allocator.NewEngine(allocator.EngineConfig{
			Global: true, ReportInterval: e.s.Regions.regionInterval(), Rules: []rules.Rule{e.rule},
		}, e.origin); err != nil {
			return nil, err
		}
		q.early = make([][]time.Duration, regions)
		for r := range regions {
			// Regions report at spread phases, as independent clusters do.
			at := time.Duration(int64(e.s.Regions.regionInterval())*int64(r)/int64(regions)) + 2*time.Millisecond
			heap.Push(&q.queue, event{at: at, fn: func() { q.regionReport(at, r) }})
			check := at + q.checkEvery()
			heap.Push(&q.queue, event{at: check, fn: func() { q.regionCheck(check, r) }})
		}
	}
	q.fleet(0, e.s.Nodes)
	heap.Push(&q.queue, event{at: 0, fn: func() { q.round(0) }})
	return q, nil
}

// regionName is region r's name: "sim" without regions.
func (q *quotaLease) regionName(r int) string {
	if q.e.s.Regions == nil {
		return "sim"
	}
	return regionName(r)
}

// engineOf is the cluster a node reports to: its region's.
func (q *quotaLease) engineOf(node int) *allocator.Engine { return q.engines[q.e.regionOf(node)] }

// regionReport sends a region's regular report and schedules the next.
func (q *quotaLease) regionReport(at time.Duration, r int) {
	g := q.e.s.Regions
	q.exchange(at, r, q.engines[r].RegionReport(q.e.time(at), g.regionInterval()))
	next := at + g.regionInterval()
	heap.Push(&q.queue, event{at: next, fn: func() { q.regionReport(next, r) }})
}

// regionCheck is the region leader's check for an early report, as the
// coordinator's (RegionEarlyChecks times an interval, with at most
// RegionEarlyInFlight early exchanges under way), and schedules the next.
func (q *quotaLease) regionCheck(at time.Duration, r int) {
	live := q.early[r][:0]
	for _, end := range q.early[r] {
		if end > at {
			live = append(live, end)
		}
	}
	q.early[r] = live
	if len(live) < allocator.RegionEarlyInFlight {
		if req := q.engines[r].RegionEarlyReport(q.e.time(at), q.e.s.Regions.regionInterval()); req != nil {
			q.early[r] = append(q.early[r], q.exchange(at, r, req))
		}
	}
	next := at + q.checkEvery()
	heap.Push(&q.queue, event{at: next, fn: func() { q.regionCheck(next, r) }})
}

func (q *quotaLease) checkEvery() time.Duration {
	return q.e.s.Regions.regionInterval() / allocator.RegionEarlyChecks
}

// exchange carries a region's report to the parent: it arrives after the
// regions' network delay, unless lost or the region is cut off, and its
// answer comes back after another. It returns when the exchange is over:
// the answer's arrival, or an interval later when none comes, as the
// leader's timeout.
func (q *quotaLease) exchange(at time.Duration, r int, req *allotpb.ReportRequest) (done time.Duration) {
	g := q.e.s.Regions
	eng := q.engines[r]
	q.msgs++
	if !q.e.parentReachable(at, r) || q.rng.Float64() < g.Loss {
		return at + g.regionInterval()
	}
	arrive := at + q.regionDelay()
	back := arrive + q.regionDelay()
	heap.Push(&q.queue, event{at: arrive, fn: func() {
		resp, err := q.parent.Report(q.e.time(arrive), req)
		if err != nil {
			return
		}
		q.msgs++
		heap.Push(&q.queue, event{at: back, fn: func() {
			if q.e.parentReachable(back, r) {
				eng.ApplyParent(q.e.time(back), resp)
			}
		}})
	}})
	return back
}

func (q *quotaLease) regionDelay() time.Duration {
	g := q.e.s.Regions
	d := g.Delay
	if g.Jitter > 0 {
		d += time.Duration(q.rng.Int64N(int64(g.Jitter)))
	}
	return d
}

// engineTransport carries a report straight to the node's cluster at the
// current virtual time; agents use it only when closing. As an
// agentdrive.Transport it makes the node's agent start no goroutine, and
// takes its reporting for the simulator to drive.
type engineTransport struct {
	q  *quotaLease
	nd *simNode
}

func (t engineTransport) Drive(r agentdrive.Reports) { t.nd.reports = r }

func (t engineTransport) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	if t.q.sh != nil {
		return t.q.sh.direct(time.Duration(t.q.now.Load()), t.nd.id, req)
	}
	return t.q.engineOf(t.nd.id).Report(t.q.e.time(time.Duration(t.q.now.Load())), req)
}

func (q *quotaLease) addNode(at time.Duration, id int) error {
	n := &simNode{id: id, clock: &simClock{q: q}}
	a, err := agent.New(agent.Config{
		NodeID: "node-" + strconv.Itoa(id), Region: q.regionName(q.e.regionOf(id)),
		Rules:     []rules.Rule{q.e.rule},
		Transport: engineTransport{q, n}, Clock: n.clock,
		ReportInterval: q.e.s.Interval,
	})
	if err != nil {
		return err
	}
	n.agent = a
	// Nodes report at evenly spread phases, as independent processes do.
	phase := time.Duration(int64(q.e.s.Interval) * int64(id%q.e.s.Nodes) / int64(max(q.e.s.Nodes, 1)))
	if q.sh != nil {
		q.sh.addNode(id)
	}
	first := at + phase + time.Millisecond
	heap.Push(&q.queue, event{at: first, fn: func() { q.report(first, n) }})
	for len(q.nodes) <= id {
		q.nodes = append(q.nodes, nil)
	}
	q.nodes[id] = n
	return nil
}

func (q *quotaLease) fleet(at time.Duration, n int) {
	for id := 0; id < n; id++ {
		if id >= len(q.nodes) || q.nodes[id] == nil || q.nodes[id].gone {
			if err := q.addNode(at, id); err != nil {
				panic(err) // the scenario's rule was validated
			}
		}
	}
	for id := n; id < len(q.nodes); id++ {
		if nd := q.nodes[id]; nd != nil && !nd.gone {
			q.leave(at, nd)
		}
	}
	q.active = n
}

// leave closes a node's agent cleanly: its last report releases its
// leases.
func (q *quotaLease) leave(at time.Duration, nd *simNode) {
	q.now.Store(int64(at))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	_ = nd.agent.Close(ctx)
	cancel()
	nd.gone = true
	q.msgs += 2
}

func (q *quotaLease) decide(at time.Duration, node, tenant int) bool {
	q.now.Store(int64(at))
	nd := q.nodes[node]
	d := nd.agent.Check(agent.Request{Tenant: q.e.tenants[tenant], Plan: q.e.plans[tenant], Cost: 1})
	// A leased key running low asks for an early report (the agent allows
	// at most ten an interval).
	if nd.reports.WantsEarly() {
		q.send(at, nd, true)
	}
	return d.Allowed
}

// send prepares a report on a node and schedules its journey: to the
// coordinator after a network delay, and back after another, unless it is
// lost or the coordinator is out of reach, when the agent sees a timeout.
func (q *quotaLease) send(at time.Duration, nd *simNode, urgent bool) {
	// A report too big for one message comes in parts, each its own
	// journey.
	for _, x := range nd.reports.Prepare(urgent) {
		q.carry(at, nd, x)
	}
}

func (q *quotaLease) carry(at time.Duration, nd *simNode, x agentdrive.Exchange) {
	q.msgs++
	if q.sh != nil {
		q.sh.carry(at, nd, x)
		return
	}
	if !q.e.reachable(at, nd.id) || q.rng.Float64() < q.e.s.Network.Loss {
		heap.Push(&q.queue, event{at: at + q.e.s.Interval/2, fn: func() { x.Deliver(nil, errUnreachable) }})
		return
	}
	arrive := at + q.delay()
	heap.Push(&q.queue, event{at: arrive, fn: func() {
		// Answered as the leader answers: at once, or at the next round
		// when a pool the report changed must be divided first.
		q.engineOf(nd.id).Submit(q.e.time(arrive), x.Request, func(answered time.Time, resp *allotpb.ReportResponse, err error) {
			back := answered.Sub(q.e.origin) + q.delay()
			q.msgs++
			heap.Push(&q.queue, event{at: back, fn: func() {
				if nd.gone {
					return
				}
				x.Deliver(resp, err)
				q.earlyAfter(back, nd)
			}})
		})
	}})
}

// earlyAfter sends the early report an answer asked for (a lowered lease
// the node says it holds), as the agent's reporter checks for one after
// each exchange, whether or not the node serves traffic.
func (q *quotaLease) earlyAfter(at time.Duration, nd *simNode) {
	if nd.reports.WantsEarly() {
		q.send(at, nd, true)
	}
}

func (q *quotaLease) delay() time.Duration {
	d := q.e.s.Network.Delay
	if j := q.e.s.Network.Jitter; j > 0 {
		d += time.Duration(q.rng.Int64N(int64(j)))
	}
	return d
}

// advance runs everything due up to at, in time order: network events,
// allocation rounds (four an interval) and the nodes' regular reports, all
// on one event queue.
func (q *quotaLease) advance(at time.Duration) {
	for {
		t, ok := q.queue.head()
		if !ok || t > at {
			return
		}
		ev := heap.Pop(&q.queue).(event)
		q.now.Store(int64(ev.at))
		ev.fn()
	}
}

// round runs an allocation round and schedules the next.
func (q *quotaLease) round(at time.Duration) {
	for _, eng := range q.engines {
		eng.Round(q.e.time(at))
	}
	if q.parent != nil {
		q.parent.Round(q.e.time(at))
	}
	next := at + q.engines[0].RoundInterval()
	heap.Push(&q.queue, event{at: next, fn: func() { q.round(next) }})
}

// report sends a node's regular report and schedules its next, until the
// node leaves.
func (q *quotaLease) report(at time.Duration, nd *simNode) {
	if nd.gone {
		return
	}
	q.send(at, nd, false)
	next := at + q.e.s.Interval
	heap.Push(&q.queue, event{at: next, fn: func() { q.report(next, nd) }})
}

// restart replaces a node's agent: the old one closes as a sidecar does on
// SIGTERM (its usage flushed, its leases released); the new one, a new
// incarnation knowing nothing, is answered once before it decides, as a
// sidecar becomes ready on its first answer, then reports at the node's
// phase. The machine stays: its clock keeps its skew, and a node cut off
// from the coordinator gets no answer.
func (q *quotaLease) restart(at time.Duration, node int) {
	old := q.nodes[node]
	q.leave(at, old)
	if err := q.addNode(at, node); err != nil {
		panic(err) // the scenario's rule was validated
	}
	nd := q.nodes[node]
	nd.clock.skew.Store(old.clock.skew.Load())
	for _, x := range nd.reports.Prepare(false) {
		q.msgs++
		if !q.e.reachable(at, node) {
			x.Deliver(nil, errUnreachable)
			continue
		}
		resp, err := q.direct(at, node, x.Request)
		x.Deliver(resp, err)
		q.msgs++
	}
}

// direct carries a report to the node's cluster at once.
func (q *quotaLease) direct(at time.Duration, node int, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	if q.sh != nil {
		return q.sh.direct(at, node, req)
	}
	return q.engineOf(node).Report(q.e.time(at), req)
}

// moveSlots moves slots between shard groups, when there are several.
func (q *quotaLease) moveSlots(at time.Duration, ev *MoveSlotsEvent) {
	if q.sh != nil {
		q.sh.moveSlots(at, ev)
	}
}

// shardsResult is the shard groups' figures, nil without shards.
func (q *quotaLease) shardsResult(d time.Duration) *ShardsResult {
	if q.sh == nil {
		return nil
	}
	return q.sh.report(d)
}

// failover makes the coordinator elect a new leader at a time.
func (q *quotaLease) failover(at time.Duration) {
	for _, eng := range q.engines {
		eng.Failover(q.e.time(at))
	}
}

// skew sets a node's clock off by a duration from the virtual time.
func (q *quotaLease) skew(node int, by time.Duration) { q.nodes[node].clock.skew.Store(int64(by)) }

func (q *quotaLease) messages() int64 { return q.msgs }
func (q *quotaLease) trips() int64    { return 0 }

func (q *quotaLease) shares(at time.Duration) []float64 {
	out := make([]float64, q.active)
	for i := 0; i < q.active; i++ {
		if nd := q.nodes[i]; nd != nil && !nd.gone {
			out[i] = nd.agent.Share(q.e.rule.Name, q.e.keyOf(0))
		}
	}
	return out
}

func (q *quotaLease) close() {
	for _, nd := range q.nodes {
		if nd != nil && !nd.gone {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = nd.agent.Close(ctx)
			cancel()
		}
	}
}

// event is something scheduled in virtual time.
type event struct {
	at  time.Duration
	seq int64
	fn  func()
}

// eventQueue orders events by time, then by when they were scheduled, so
// runs are deterministic.
type eventQueue struct {
	items []event
	seq   int64
}

func (h *eventQueue) Len() int { return len(h.items) }
func (h *eventQueue) Less(i, j int) bool {
	if h.items[i].at != h.items[j].at {
		return h.items[i].at < h.items[j].at
	}
	return h.items[i].seq < h.items[j].seq
}
func (h *eventQueue) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *eventQueue) Push(x any) {
	ev := x.(event)
	h.seq++
	ev.seq = h.seq
	h.items = append(h.items, ev)
}
func (h *eventQueue) Pop() any {
	ev := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return ev
}

// head is the earliest event's time, if any.
func (h *eventQueue) head() (time.Duration, bool) {
	if len(h.items) == 0 {
		return 0, false
	}
	return h.items[0].at, true
}
