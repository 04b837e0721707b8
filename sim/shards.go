package sim

import (
	"container/heap"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/internal/agentdrive"
	"github.com/allot-io/allot/internal/shard"
	"github.com/allot-io/allot/internal/shardroute"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The strategies of a scenario with shards: its region as shard groups;
// as one group whose leader has the same capacity; as one group without
// a limit on it. All three are Allot, agents routing through
// shardroute.Router to allocator.Engines.
const (
	shardGroups       = "shard-groups"
	oneGroup          = "one-group"
	oneGroupUnlimited = "one-group-unlimited"
)

var shardStrategyNames = []string{shardGroups, oneGroup, oneGroupUnlimited}

// shardNet carries agents' reports through each node's router to the
// groups' engines: the path from a node to every group has the
// scenario's delay and jitter (one draw each way per report), and each
// group's leader serves reports one at a time at its capacity.
type shardNet struct {
	q     *quotaLease
	spec  ShardsSpec
	ids   []string
	home  *allocator.Engine
	byID  map[string]*allocator.Engine
	lead  map[string]*leader
	nodes map[int]*nodeRoute
	// unlimited leaders serve at once.
	unlimited bool
	mu        sync.Mutex // below, and the leaders: lanes run in parallel
	moved     int64      // parts refused as moved
	waiting   map[*allotpb.UsageCount]time.Duration
	waits     []time.Duration
	waitUnits int64
	moves     []*moveRecord
}

// leader is one group's leader as a server, in a fluid model: each
// simulated report stands for Scale reports of its size from as many
// nodes, at phases spread over the interval, so its work (entries ×
// Scale) arrives evenly over the next interval. The leader serves at its
// capacity; work it cannot serve at once waits, first in first out. A
// report waits for the backlog ahead of it, then its own entries ÷
// capacity.
type leader struct {
	at       time.Duration // the backlog is known up to here
	backlog  float64       // key entries waiting
	streams  []stream
	busy     float64 // seconds serving, after the warm-up
	offered  float64 // key entries arrived after the warm-up, scaled
	delays   []time.Duration
	timeouts int64
}

// stream is one report's work arriving, rate entries a second until end.
type stream struct {
	end  time.Duration
	rate float64
}

// advance brings the backlog to t, serving at capacity c.
func (ld *leader) advance(t time.Duration, c float64, warmup time.Duration) {
	for ld.at < t {
		next, lambda := t, 0.0
		for _, st := range ld.streams {
			lambda += st.rate
			next = min(next, st.end)
		}
		dt := (next - ld.at).Seconds()
		served := c * dt
		switch {
		case lambda >= c:
			ld.backlog += (lambda - c) * dt
		case ld.backlog/(c-lambda) >= dt:
			ld.backlog -= (c - lambda) * dt
		default:
			drain := ld.backlog / (c - lambda)
			served = c*drain + lambda*(dt-drain)
			ld.backlog = 0
		}
		if ld.at >= warmup {
			ld.busy += served / c
		}
		ld.at = next
		live := ld.streams[:0]
		for _, st := range ld.streams {
			if st.end > next {
				live = append(live, st)
			}
		}
		ld.streams = live
	}
}

type moveRecord struct {
	ev         *MoveSlotsEvent
	at, done   time.Duration
	id         uint64
	mapVersion uint64
}

// nodeRoute is a node's router and the exchange it is carrying.
type nodeRoute struct {
	id     int
	router *shardroute.Router
	cur    *routeCall
}

// routeCall is one report carried by a router: when its parts reach the
// groups, and when the last answer is back.
type routeCall struct {
	mu         sync.Mutex
	phaseStart time.Duration
	phaseEnd   time.Duration
	deadline   time.Duration
	back       time.Duration
	called     map[string]bool
	newPhase   bool
	end        time.Duration
	salt       uint64
}

// newShardLease is Allot with the scenario's shards: groups of them
// (one with the same leader, or an unlimited one, for the baselines).
func newShardLease(e *env, groups int, unlimited bool) (*quotaLease, error) {
	q := &quotaLease{e: e, rng: rand.New(rand.NewPCG(e.s.Seed, 77))}
	sn := &shardNet{q: q, spec: *e.s.Shards, byID: map[string]*allocator.Engine{}, lead: map[string]*leader{},
		nodes: map[int]*nodeRoute{}, unlimited: unlimited, waiting: map[*allotpb.UsageCount]time.Duration{}}
	for i := range groups {
		var sh *allocator.EngineShards
		if groups > 1 {
			sh = &allocator.EngineShards{Group: groupName(i), Home: i == 0}
		}
		eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "sim", ReportInterval: e.s.Interval, Rules: []rules.Rule{e.rule}, Shards: sh}, e.origin)
		if err != nil {
			return nil, err
		}
		id := groupName(i)
		sn.ids = append(sn.ids, id)
		sn.byID[id] = eng
		sn.lead[id] = &leader{}
		q.engines = append(q.engines, eng)
	}
	sn.home = q.engines[0]
	if groups > 1 {
		if err := sn.layout(); err != nil {
			return nil, err
		}
	}
	q.sh = sn
	q.fleet(0, e.s.Nodes)
	heap.Push(&q.queue, event{at: 0, fn: func() { q.round(0) }})
	return q, nil
}

// layout gives each group its starting slots before the run, by moves
// from the home group, each taken by the mover's steps.
func (sn *shardNet) layout() error {
	now := sn.q.e.origin
	for i := 1; i < len(sn.ids); i++ {
		if _, err := sn.home.AddGroup(sn.ids[i], []string{"sim-" + sn.ids[i]}); err != nil {
			return err
		}
		last := shard.Slots - 1
		if i+1 < len(sn.ids) {
			last = sn.spec.firstSlot(i+1) - 1
		}
		if _, err := sn.home.MoveSlots(now, uint32(sn.spec.firstSlot(i)), uint32(last), sn.ids[i]); err != nil {
			return fmt.Errorf("sim: laying out shard groups: %w", err)
		}
	}
	for range 4 {
		if sn.home.StepMoves(now, sn.engine) == 0 {
			return nil
		}
	}
	return fmt.Errorf("sim: laying out shard groups: moves did not finish")
}

// engine is a group's engine, nil for none.
func (sn *shardNet) engine(id string) *allocator.Engine { return sn.byID[id] }

// addNode makes a node's router, as a new agent process does.
func (sn *shardNet) addNode(id int) {
	nr := &nodeRoute{id: id}
	global := sn.q.e.rule.Scope == rules.Global
	nr.router = shardroute.New(&simLane{sn: sn, node: nr, group: sn.ids[0]}, shardroute.Config{
		Lane: func(group string, _ []string) shardroute.Lane { return &simLane{sn: sn, node: nr, group: group} },
		Map: func(_ context.Context, known uint64) (*allotpb.ShardMap, error) {
			c := nr.cur
			c.mu.Lock()
			defer c.mu.Unlock()
			// A round trip to the home group, before the next round.
			c.phaseEnd += 2 * (c.back)
			c.newPhase = true
			return sn.home.ShardMap(known), nil
		},
		Global: func(string) bool { return global },
	})
	sn.nodes[id] = nr
}

// carry takes a node's report through its router: the parts leave after
// the forward delay and the agent has the router's answer when the last
// group's is back (or the report's deadline, an interval, is past).
func (sn *shardNet) carry(at time.Duration, nd *simNode, x agentdrive.Exchange) {
	q := sn.q
	deadline := at + q.e.s.Interval - time.Millisecond
	if !q.e.reachable(at, nd.id) {
		heap.Push(&q.queue, event{at: at + q.e.s.Interval/2, fn: func() { x.Deliver(nil, errUnreachable) }})
		return
	}
	fwd, back := q.delay(), q.delay()
	arrive := at + fwd
	salt := q.rng.Uint64()
	nr := sn.nodes[nd.id]
	heap.Push(&q.queue, event{at: arrive, fn: func() {
		if nd.gone {
			return
		}
		c := &routeCall{phaseStart: arrive, phaseEnd: arrive, deadline: deadline, back: back, called: map[string]bool{}, end: arrive + back, salt: salt}
		nr.cur = c
		resp, err := nr.router.Report(context.Background(), x.Request)
		nr.cur = nil
		end := min(max(c.end, arrive+back), deadline)
		q.msgs++
		heap.Push(&q.queue, event{at: end, fn: func() {
			if !nd.gone {
				x.Deliver(resp, err)
				q.earlyAfter(end, nd)
			}
		}})
	}})
}

// direct carries a report at once, without delays, for a leaving or
// restarted node.
func (sn *shardNet) direct(at time.Duration, node int, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	nr := sn.nodes[node]
	nr.cur = &routeCall{phaseStart: at, phaseEnd: at, deadline: at + sn.q.e.s.Interval, called: map[string]bool{}, end: at}
	defer func() { nr.cur = nil }()
	return nr.router.Report(context.Background(), req)
}

// simLane is a node's path to one group's leader.
type simLane struct {
	sn    *shardNet
	node  *nodeRoute
	group string
}

func (l *simLane) Learn([]string) {}

var errLaneTimeout = status.Error(codes.DeadlineExceeded, "sim: the group's leader did not answer within the report's deadline")

func (l *simLane) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	sn, q, c := l.sn, l.sn.q, l.node.cur
	c.mu.Lock()
	if c.called[l.group] || c.newPhase {
		// The router's next round: it starts once the last one's answers
		// are back.
		c.phaseStart, c.called, c.newPhase = c.phaseEnd+c.back, map[string]bool{}, false
	}
	c.called[l.group] = true
	arrive, deadline := c.phaseStart, c.deadline
	c.mu.Unlock()
	if q.e.s.Network.Loss > 0 && lossDraw(c.salt, l.group) < q.e.s.Network.Loss {
		return nil, errLaneTimeout
	}
	entries := len(req.GetDemand()) + len(req.GetUsage().GetCounts())
	served, done := sn.serve(l.group, arrive, entries, deadline)
	if !served {
		return nil, errLaneTimeout
	}
	resp, err := sn.byID[l.group].Report(q.e.time(time.Duration(q.now.Load())), req)
	answer := done + c.back
	if answer > deadline {
		return nil, errLaneTimeout // applied, and its fate unknown to the router: it re-sends the part unchanged
	}
	sn.account(req, err, resp, arrive, answer)
	c.mu.Lock()
	c.end = max(c.end, answer)
	c.phaseEnd = max(c.phaseEnd, answer)
	c.mu.Unlock()
	return resp, err
}

// lossDraw is a deterministic draw in [0, 1) for a report's part to a
// group: the router calls its lanes in parallel, so the run's generator
// cannot be drawn from in their order.
func lossDraw(salt uint64, group string) float64 {
	h := salt
	for i := 0; i < len(group); i++ {
		h = (h ^ uint64(group[i])) * 0x100000001b3
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	return float64(h>>11) / (1 << 53)
}

// serve queues a report of n entries at a group's leader arriving at
// arrive: it waits for the backlog, unless that takes it past the
// report's deadline (the caller gave up: it costs nothing), then takes n ÷
// capacity; its work, scaled, joins the leader's load over an interval.
func (sn *shardNet) serve(group string, arrive time.Duration, n int, deadline time.Duration) (served bool, done time.Duration) {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	ld := sn.lead[group]
	cost := float64(n) * sn.spec.scale()
	warmup := sn.q.e.s.Warmup
	warm := arrive >= warmup
	if warm {
		ld.offered += cost
	}
	if sn.unlimited {
		if warm {
			ld.delays = append(ld.delays, 0)
		}
		return true, arrive
	}
	c := sn.spec.capacity()
	ld.advance(arrive, c, warmup)
	wait := time.Duration(ld.backlog / c * float64(time.Second))
	if arrive+wait > deadline {
		if warm {
			ld.delays = append(ld.delays, deadline-arrive)
			ld.timeouts++
		}
		return false, 0
	}
	if warm {
		ld.delays = append(ld.delays, wait)
	}
	iv := sn.q.e.s.Interval
	ld.streams = append(ld.streams, stream{end: max(arrive, ld.at) + iv, rate: cost / iv.Seconds()})
	return true, arrive + wait + time.Duration(float64(n)/c*float64(time.Second))
}

// account counts a group's answer to a part: a refusal as moved, and how
// long the usage refused so waited until some group took it.
func (sn *shardNet) account(req *allotpb.ReportRequest, err error, resp *allotpb.ReportResponse, arrive, answer time.Duration) {
	b := req.GetUsage()
	if b == nil || b.GetSeq() == 0 {
		return
	}
	sn.mu.Lock()
	defer sn.mu.Unlock()
	if err != nil {
		if st, _ := status.FromError(err); st.Code() == codes.FailedPrecondition {
			sn.moved++
			for _, c := range b.GetCounts() {
				if _, ok := sn.waiting[c]; !ok {
					sn.waiting[c] = arrive
				}
			}
		}
		return
	}
	if resp.GetAckedSeq() < b.GetSeq() || len(sn.waiting) == 0 {
		return
	}
	for _, c := range b.GetCounts() {
		if t0, ok := sn.waiting[c]; ok {
			sn.waits = append(sn.waits, answer-t0)
			sn.waitUnits += int64(c.GetAdmitted() + c.GetDenied())
			delete(sn.waiting, c)
		}
	}
}

// moveSlots plans a move at the home group and has the mover step it on
// every Step until it is done.
func (sn *shardNet) moveSlots(at time.Duration, ev *MoveSlotsEvent) {
	if len(sn.ids) < 2 {
		sn.moves = append(sn.moves, &moveRecord{ev: ev, at: at, done: -1})
		return
	}
	mv, err := sn.home.MoveSlots(sn.q.e.time(at), uint32(ev.First), uint32(ev.Last), sn.ids[ev.To])
	rec := &moveRecord{ev: ev, at: at, done: -1}
	sn.moves = append(sn.moves, rec)
	if err != nil {
		return
	}
	rec.id = mv.GetId()
	var step func(t time.Duration)
	step = func(t time.Duration) {
		sn.home.StepMoves(sn.q.e.time(t), sn.engine)
		m := sn.home.ShardMap(0)
		for _, x := range m.GetMoves() {
			if x.GetId() == rec.id && !shard.Active(x) {
				if x.GetPhase() == allotpb.SlotMove_DONE {
					rec.done, rec.mapVersion = t, m.GetVersion()
				}
				return
			}
		}
		next := t + sn.spec.step()
		heap.Push(&sn.q.queue, event{at: next, fn: func() { step(next) }})
	}
	heap.Push(&sn.q.queue, event{at: at, fn: func() { step(at) }})
}

// report is the shards' figures of a run of length d.
func (sn *shardNet) report(d time.Duration) *ShardsResult {
	sn.mu.Lock()
	defer sn.mu.Unlock()
	run := (d - sn.q.e.s.Warmup).Seconds()
	out := &ShardsResult{Groups: len(sn.ids), CapacityPerLeader: sn.spec.capacity(), Scale: sn.spec.scale(), RefusedAsMoved: sn.moved}
	if sn.unlimited {
		out.CapacityPerLeader = 0
	}
	for _, id := range sn.ids {
		ld := sn.lead[id]
		if !sn.unlimited {
			ld.advance(d, sn.spec.capacity(), sn.q.e.s.Warmup)
		}
		g := GroupLoad{Group: id, Slots: sn.byID[id].OwnedSlots(), EntriesPerSecond: ld.offered / run, Utilisation: ld.busy / run, Timeouts: ld.timeouts}
		if sn.unlimited {
			g.Utilisation = 0
		}
		g.P99QueueDelay = p99(ld.delays)
		out.PerGroup = append(out.PerGroup, g)
		out.EntriesPerSecond += g.EntriesPerSecond
	}
	for _, m := range sn.moves {
		mr := MoveResult{First: m.ev.First, Last: m.ev.Last, To: m.ev.To, At: m.at, Took: -1, MapVersion: m.mapVersion}
		if m.done >= 0 {
			mr.Took = m.done - m.at
		}
		out.Moves = append(out.Moves, mr)
	}
	out.UsageWaited = len(sn.waits)
	out.UnitsWaited = sn.waitUnits
	if n := len(sn.waits); n > 0 {
		var sum time.Duration
		for _, w := range sn.waits {
			sum += w
		}
		out.MeanWait, out.MaxWait = sum/time.Duration(n), slices.Max(sn.waits)
	}
	out.StillWaiting = len(sn.waiting)
	return out
}

// p99 is the 99th percentile of ds (sorted in place), 0 for none.
func p99(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, len(ds)*99/100)]
}
