package shardroute

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Router carries one reporter's reports to the shard groups of a region
// (docs/coordinator.md#shard-groups): an agent's, or a coordinator's for
// an Envoy RLQS stream. Each usage count goes to the group
// its tenant's slot is routed to, each key's demand likewise (a global
// rule's to the home group), and every group hears from the node each
// interval, so every group counts the whole fleet.
//
// Exactly once holds per group as it does for one cluster: the counts a
// group is sent form parts, each numbered in that group's own sequence
// (per incarnation and group), sent in order, one at a time, and sent
// again unchanged until the group acknowledges or definitively refuses
// it. A group refuses a part outright, applying none of it, when it holds
// a slot the group does not own (it moved) or breaks the protocol's
// limits; only then are its counts routed again, by a newer map. The
// reporter above numbers its batches as before: a batch is acknowledged
// to it once every one of its counts is acknowledged by some group.
//
// A region never split has no map (version 0): every part goes to the
// home group, and the only difference on the wire is that the sequence is
// the router's.
type Router struct {
	home Lane
	cfg  Config
	log  hclog.Logger

	mu    sync.Mutex
	m     *shard.Map // nil: one group, the home
	lanes map[string]*lane
	// parts are the counts sent, or to send, and not acknowledged: in
	// each lane's sequence order.
	parts []*part
	// acked are counts some group acknowledged, kept until their batch
	// is acknowledged to the reporter.
	acked map[*allotpb.UsageCount]bool
	// refused are the parts refused as moved in this call, by slot: not
	// routed again until the map changes.
	refused map[shard.Slot]uint64
	// lastPlanned is set once the reporter's last batch
	// (UsageBatch.last) is planned as a part for every group.
	lastPlanned bool
}

// Lane carries reports to one group's leader: a cluster client that
// follows the leader and fails over among the members it knows.
type Lane interface {
	Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error)
	// Learn adds members the group named in an answer.
	Learn(addrs []string)
}

// Config is what a Router needs besides the home group's lane.
type Config struct {
	// Lane makes the lane of another group from its ID and its members'
	// addresses.
	Lane func(group string, addrs []string) Lane
	// Map fetches the home group's map when newer than known (an empty
	// map with the version when not).
	Map func(ctx context.Context, known uint64) (*allotpb.ShardMap, error)
	// Global reports whether a rule is a global one, whose classes the
	// home group divides.
	Global func(rule string) bool
	// Log hears of maps and of maps it could not use; nil discards.
	Log hclog.Logger
}

// lane is one group's client and sequence.
type lane struct {
	group  string
	client Lane
	seq    uint64
}

type part struct {
	lane  *lane
	batch *allotpb.UsageBatch
}

// maxRouteRounds bounds the exchanges of one report: a first, and one
// per newer map a refusal brings.
const maxRouteRounds = 3

// New returns a router whose reports go to the home group's lane until a
// map names other groups.
func New(home Lane, cfg Config) *Router {
	if cfg.Log == nil {
		cfg.Log = hclog.NewNullLogger()
	}
	if cfg.Global == nil {
		cfg.Global = func(string) bool { return false }
	}
	return &Router{home: home, cfg: cfg, log: cfg.Log, lanes: map[string]*lane{}, acked: map[*allotpb.UsageCount]bool{}}
}

// Version is the version of the map the router routes by, 0 before any.
func (r *Router) Version() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.version()
}

// homeID is the home group's ID ("" before any map names it).
func (r *Router) homeID() string {
	if r.m == nil {
		return ""
	}
	return r.m.Home
}

// laneOf is the lane of a group, made when first needed.
func (r *Router) laneOf(group string) *lane {
	if l := r.lanes[group]; l != nil {
		return l
	}
	l := &lane{group: group, client: r.home}
	if group != r.homeID() {
		// Never the home group's client: a client learns the members
		// its cluster names, and one cluster's members must never be
		// called for another's reports.
		l.client = r.cfg.Lane(group, r.groupAddrs(group))
	}
	r.lanes[group] = l
	return l
}

func (r *Router) groupAddrs(group string) []string {
	if r.m == nil {
		return nil
	}
	return r.m.Groups[group]
}

// route is the group a tenant's counts and keys go to.
func (r *Router) route(tenant string) string {
	if r.m == nil {
		return ""
	}
	return r.m.Route(tenant)
}

// exchange is one group's part of one report.
type exchange struct {
	lane   *lane
	req    *allotpb.ReportRequest
	part   *part
	demand []int // indices in the reporter's request
	resp   *allotpb.ReportResponse
	err    error
	// sent and done are when the exchange went and its answer came: the
	// merged answer's clock readings are the home group's, moved by the
	// time the report spent on the other groups (see stampClock).
	sent, done time.Time
}

// Report carries one report: its usage and demand to the groups they
// are routed to, and the answer merged as one group's would be.
func (r *Router) Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	start := time.Now()
	r.refused = map[shard.Slot]uint64{}
	var answered []*exchange
	var firstErr, contentErr error
	demandLost := false
	for round := 0; round < maxRouteRounds && ctx.Err() == nil; round++ {
		xs := r.plan(req, round > 0)
		if len(xs) == 0 {
			break
		}
		r.send(ctx, xs)
		version, again := uint64(0), false
		for _, x := range xs {
			v, moved, err := r.absorb(req, x)
			switch {
			case x.err == nil:
				answered = append(answered, x)
			case moved:
				again = true
			case err != nil:
				contentErr = err
			default:
				firstErr = cmp.Or(firstErr, x.err)
				demandLost = demandLost || len(x.demand) > 0
			}
			version = max(version, v)
		}
		if version > r.version() {
			r.refresh(ctx, version)
			again = true
		}
		if contentErr != nil || !again {
			break
		}
	}
	if contentErr != nil {
		return nil, contentErr
	}
	if len(answered) == 0 {
		if firstErr == nil {
			firstErr = status.Error(codes.Unavailable, "no shard group answered")
		}
		return nil, firstErr
	}
	out := r.merge(req, answered, demandLost)
	r.stampClock(out, answered[0], start, time.Now())
	return out, nil
}

// stampClock gives the merged answer the home group's clock readings
// (answered[0] after merge: the home's exchange when it answered),
// widened by the time the report spent before that exchange went and
// after its answer came: the reporter takes the span between the two out
// of its round trip before it estimates its clock's offset from the
// coordinators' (received_unix_nano), and a wait on another group's
// answer is no part of the network's delay either. Without it, a group
// answering at its next allocation round after the home had put the
// reporter's clock ahead by half that wait.
func (r *Router) stampClock(out *allotpb.ReportResponse, x *exchange, start, end time.Time) {
	resp := x.resp
	out.CoordinatorUnixNano = resp.GetCoordinatorUnixNano()
	if rcv := resp.GetReceivedUnixNano(); rcv > 0 && out.CoordinatorUnixNano > 0 {
		out.ReceivedUnixNano = rcv - int64(x.sent.Sub(start))
		out.CoordinatorUnixNano += int64(end.Sub(x.done))
	}
}

func (r *Router) version() uint64 {
	if r.m == nil {
		return 0
	}
	return r.m.Version
}

// plan makes this round's exchanges: the batch's counts no group holds
// yet become parts, and each lane sends its first part and its demand.
// A later round (after a refusal) sends only what moved.
func (r *Router) plan(req *allotpb.ReportRequest, retry bool) []*exchange {
	if b := req.GetUsage(); b != nil && b.GetSeq() > 0 {
		held := map[*allotpb.UsageCount]bool{}
		for _, p := range r.parts {
			for _, c := range p.batch.GetCounts() {
				held[c] = true
			}
		}
		byGroup := map[string][]*allotpb.UsageCount{}
		var order []string
		for _, c := range b.GetCounts() {
			if r.acked[c] || held[c] {
				continue
			}
			if v, ok := r.refused[shard.Of(c.GetTenant())]; ok && v == r.version() {
				continue // refused as moved by this map: wait for a newer one
			}
			g := r.route(c.GetTenant())
			if _, ok := byGroup[g]; !ok {
				order = append(order, g)
			}
			byGroup[g] = append(byGroup[g], c)
		}
		for _, g := range order {
			l := r.laneOf(g)
			l.seq++
			r.parts = append(r.parts, &part{lane: l, batch: &allotpb.UsageBatch{Seq: l.seq, CutUnixNano: b.GetCutUnixNano(), Counts: byGroup[g]}})
		}
		if b.GetLast() && !r.lastPlanned {
			// The reporter's last batch: every group it sent usage to
			// is told, so that none waits for it past its windows' end.
			r.lastPlanned = true
			for _, g := range slices.Sorted(maps.Keys(r.lanes)) {
				if l := r.lanes[g]; l.seq > 0 {
					l.seq++
					r.parts = append(r.parts, &part{lane: l, batch: &allotpb.UsageBatch{Seq: l.seq, CutUnixNano: b.GetCutUnixNano(), Last: true}})
				}
			}
		}
	}
	xs := map[*lane]*exchange{}
	var out []*exchange
	get := func(l *lane) *exchange {
		if x := xs[l]; x != nil {
			return x
		}
		sub := allotpb.ReportHeader(req)
		sub.Group = l.group
		x := &exchange{lane: l, req: sub}
		xs[l] = x
		out = append(out, x)
		return x
	}
	for _, p := range r.parts {
		if x := get(p.lane); x.part == nil {
			x.part = p
			x.req.Usage = p.batch
		}
	}
	if !retry {
		for i, d := range req.GetDemand() {
			g := r.route(d.GetTenant())
			if r.cfg.Global(d.GetRule()) {
				g = r.homeID()
			}
			x := get(r.laneOf(g))
			x.req.Demand = append(x.req.Demand, d)
			x.demand = append(x.demand, i)
		}
		if !req.GetUrgent() && r.m != nil {
			for _, g := range r.m.GroupIDs() {
				get(r.laneOf(g)) // every group counts the fleet
			}
		}
		if len(out) == 0 {
			get(r.laneOf(r.homeID()))
		}
	}
	r.homeFirst(out)
	return out
}

// homeFirst puts the home group's exchanges first, the others in their
// order: the home's answer carries the region's rules, settings and clock
// (the other groups mirror its rules, and may lag behind).
func (r *Router) homeFirst(xs []*exchange) {
	home := r.homeID()
	slices.SortStableFunc(xs, func(a, b *exchange) int {
		return cmp.Compare(rank(a.lane.group != home), rank(b.lane.group != home))
	})
}

func rank(notHome bool) int {
	if notHome {
		return 1
	}
	return 0
}

// send carries the exchanges to their groups at once.
func (r *Router) send(ctx context.Context, xs []*exchange) {
	one := func(x *exchange) {
		x.sent = time.Now()
		x.resp, x.err = x.lane.client.Report(ctx, x.req)
		x.done = time.Now()
	}
	if len(xs) == 1 {
		one(xs[0])
		return
	}
	var wg sync.WaitGroup
	for _, x := range xs {
		wg.Go(func() { one(x) })
	}
	wg.Wait()
}

// absorb takes one group's answer: an acknowledged part's counts are
// acknowledged; a part refused outright is dropped, its counts routed
// again. It returns the map version the group named, whether it refused
// the part as moved, and, for a refusal of the report's content, the
// error to give the reporter with its fields named in the reporter's
// request.
func (r *Router) absorb(req *allotpb.ReportRequest, x *exchange) (version uint64, moved bool, content error) {
	if x.err == nil {
		x.lane.client.Learn(x.resp.GetCoordinators())
		if p := x.part; p != nil && x.resp.GetAckedSeq() >= p.batch.GetSeq() {
			for _, c := range p.batch.GetCounts() {
				r.acked[c] = true
			}
			r.drop(p)
		}
		// Every group stamps the home group's map version as it last
		// read it: a newer one is fetched from the home group.
		return x.resp.GetShardMapVersion(), false, nil
	}
	st, _ := status.FromError(x.err)
	switch {
	case st.Code() == codes.FailedPrecondition:
		for _, d := range st.Details() {
			if sm, ok := d.(*allotpb.SlotsMoved); ok {
				if x.part != nil {
					r.drop(x.part)
				}
				for _, s := range sm.GetSlots() {
					r.refused[shard.Slot(s)] = r.version()
				}
				r.log.Debug("shard group refused usage of slots it does not own; routing it again", "group", sm.GetGroup(), "slots", len(sm.GetSlots()), "map_version", sm.GetMapVersion())
				return sm.GetMapVersion(), true, nil
			}
		}
	case st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max"), st.Code() == codes.InvalidArgument:
		// Not applied: the reporter mends its report, and the part's
		// counts left in it are routed afresh.
		if x.part != nil {
			r.drop(x.part)
		}
		return 0, false, r.translate(req, x, st)
	}
	return 0, false, nil
}

// drop removes a part that is settled.
func (r *Router) drop(p *part) {
	if i := slices.Index(r.parts, p); i >= 0 {
		r.parts = slices.Delete(r.parts, i, i+1)
	}
}

// translate renames a refusal's field violations from a group's part of
// the report to the reporter's request: usage.counts[i] and demand[i]
// name entries of the request the reporter sent.
func (r *Router) translate(req *allotpb.ReportRequest, x *exchange, st *status.Status) error {
	var br *errdetails.BadRequest
	for _, d := range st.Details() {
		if b, ok := d.(*errdetails.BadRequest); ok {
			br = b
		}
	}
	if br == nil {
		return st.Err()
	}
	counts := map[*allotpb.UsageCount]int{}
	for i, c := range req.GetUsage().GetCounts() {
		counts[c] = i
	}
	out := &errdetails.BadRequest{}
	for _, fv := range br.GetFieldViolations() {
		v := allotpb.ParseViolation(fv.GetField(), fv.GetDescription())
		field := fv.GetField()
		switch {
		case v.Count >= 0 && x.req.GetUsage() != nil && v.Count < len(x.req.GetUsage().GetCounts()):
			i, ok := counts[x.req.GetUsage().GetCounts()[v.Count]]
			if !ok {
				continue
			}
			field = "usage.counts[" + strconv.Itoa(i) + "]" + after(field, "]")
		case v.Demand >= 0 && v.Demand < len(x.demand):
			field = "demand[" + strconv.Itoa(x.demand[v.Demand]) + "]" + after(field, "]")
		}
		out.FieldViolations = append(out.FieldViolations, &errdetails.BadRequest_FieldViolation{Field: field, Description: fv.GetDescription()})
	}
	ns := status.New(st.Code(), st.Message())
	if d, err := ns.WithDetails(out); err == nil {
		ns = d
	}
	return ns.Err()
}

func after(s, sep string) string {
	if _, rest, ok := strings.Cut(s, sep); ok {
		return rest
	}
	return ""
}

// merge is the reporter's answer from the groups that answered: every
// lease, the home group's rules and settings, the fleet's largest count.
// The batch is acknowledged once each of its counts is. Leases are
// renewed only when every group asked for keys answered.
func (r *Router) merge(req *allotpb.ReportRequest, answered []*exchange, demandLost bool) *allotpb.ReportResponse {
	r.homeFirst(answered)
	homeAnswered := answered[0].lane.group == r.homeID()
	var out *allotpb.ReportResponse
	renew := int64(0)
	for _, x := range answered {
		resp := x.resp
		if out == nil {
			out = &allotpb.ReportResponse{
				Protocol: resp.GetProtocol(), Epoch: resp.GetEpoch(),
				RulesVersion: resp.GetRulesVersion(), Rules: resp.GetRules(), ReportIntervalNano: resp.GetReportIntervalNano(),
				LeaseTtlNano: resp.GetLeaseTtlNano(), BillingWindowNano: resp.GetBillingWindowNano(),
				Group: resp.GetGroup(), ShardMapVersion: resp.GetShardMapVersion(),
				// Every group numbers the home group's overrides alike
				// (a mirror lags, never diverges): the first answer's,
				// the home group's when it answered.
				Overrides: resp.GetOverrides(),
				Resets:    resp.GetResets(),
			}
			if !homeAnswered {
				// Another group's rules may be behind the home's: keep
				// the agent's until the home group answers.
				out.RulesVersion, out.Rules = req.GetRulesVersion(), nil
			}
			renew = resp.GetRenewUnixNano()
		}
		if x.lane.group == r.homeID() {
			// The reporter's client is the home group's: it learns only
			// the home group's members.
			out.Coordinators = resp.GetCoordinators()
		}
		out.Leases = append(out.Leases, resp.GetLeases()...)
		out.Nodes = max(out.Nodes, resp.GetNodes())
		// The smallest epoch: a key that moved holds a lease of another
		// group, whose epochs are not comparable with this one's, and a
		// lease from a smaller epoch is taken as from a restored cluster.
		out.Epoch = min(out.Epoch, resp.GetEpoch())
		if resp.GetRenewUnixNano() > 0 {
			renew = min(renew, resp.GetRenewUnixNano())
		}
	}
	if !demandLost {
		out.RenewUnixNano = renew
	}
	if b := req.GetUsage(); b != nil && b.GetSeq() > 0 {
		done := true
		for _, c := range b.GetCounts() {
			done = done && r.acked[c]
		}
		if done {
			out.AckedSeq = b.GetSeq()
			for _, c := range b.GetCounts() {
				delete(r.acked, c)
			}
		} else {
			out.AckedSeq = b.GetSeq() - 1
		}
	}
	return out
}

// refresh fetches a newer map from the home group.
func (r *Router) refresh(ctx context.Context, want uint64) {
	pm, err := r.cfg.Map(ctx, r.version())
	if err != nil {
		r.log.Warn("could not fetch the shard map; routing by the one held", "version", r.version(), "wanted", want, "error", err)
		return
	}
	if pm.GetVersion() <= r.version() || len(pm.GetRanges()) == 0 {
		return
	}
	m, err := shard.FromProto(pm)
	if err != nil {
		r.log.Error("the home group sent a shard map this agent cannot use; routing by the one held", "version", pm.GetVersion(), "error", err)
		return
	}
	if r.m == nil {
		// The region's first map: what went to the home group so far
		// went there under its ID.
		if l := r.lanes[""]; l != nil {
			delete(r.lanes, "")
			l.group = m.Home
			r.lanes[m.Home] = l
		}
	}
	for g, l := range r.lanes {
		if addrs, ok := m.Groups[g]; ok && g != m.Home {
			l.client.Learn(addrs)
		}
	}
	r.m = m
	r.log.Info("shard map", "version", m.Version, "groups", len(m.Groups))
}
