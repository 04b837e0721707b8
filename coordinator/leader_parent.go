package coordinator

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/clusterclient"
	allotpb "github.com/allot-io/allot/proto"
)

// parentLink is a region cluster's side of the tier: its leader reports
// the region's demand to the parent every ParentInterval and applies the
// leases that come back (allocator/tier.go). Followers keep the link idle.
type parentLink struct {
	client      *clusterclient.Client
	incarnation uint64 // drawn per process, as an agent's
	// confirm asks the leader's loop for an early check at once: an
	// answer lowered a lease, which the parent counts as given up only
	// once a report says the region holds it.
	confirm chan struct{}

	mu      sync.Mutex
	lastOK  int64  // ns, this cluster's clock
	lastErr string // the last exchange's error, "" when it was answered
}

func newParentLink(cfg *Config, onError func(error)) (*parentLink, error) {
	opts, err := clusterclient.DialOptions(nil, cfg.ParentCredentials, onError)
	if err != nil {
		return nil, err
	}
	return &parentLink{client: clusterclient.New(cfg.Parent, opts), incarnation: rand.Uint64(), confirm: make(chan struct{}, 1)}, nil
}

// tierGroup is the shard group the region's reports to the parent come
// from: "" for a region never split, so that its reports are as before.
func (c *Coordinator) tierGroup() string {
	split := !c.isHome()
	if !split {
		c.fsm.Read(func(st *state.State) { split = st.ShardMapVersion() > 0 })
	}
	if !split {
		return ""
	}
	return c.groupID()
}

// reportToParent runs the leader's exchanges with the parent until ctx
// ends (leadership lost, or shutdown): a report of every tiered key each
// ParentInterval, and between them, checked RegionEarlyChecks times an
// interval, early reports of the keys whose demand moved (EarlyDemand),
// at most RegionEarlyInFlight under way at once. Exchanges do not wait for each
// other: an answer older than one applied since is recognised by its
// leases' numbers (ApplyParent), and a report made before an answer
// arrived, holding the lease that answer replaced, is answered with the
// region's grant as it stands, as the parent resends a lease to whoever
// reports holding an older one.
func (c *Coordinator) reportToParent(ctx context.Context) {
	// A new leader holds no lease from the parent: until its first
	// exchange it divides the static fractions.
	c.alloc.ResetParent()
	interval := c.cfg.ParentInterval
	var wg sync.WaitGroup
	defer wg.Wait()
	c.exchangeWithParent(ctx, c.now().UnixNano(), nil)
	t := c.cfg.Clock.NewTicker(interval)
	defer t.Stop()
	check := c.cfg.Clock.NewTicker(max(interval/allocator.RegionEarlyChecks, time.Millisecond))
	defer check.Stop()
	early := make(chan struct{}, allocator.RegionEarlyInFlight) // a slot per early exchange under way
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			wg.Go(func() { c.exchangeWithParent(ctx, c.now().UnixNano(), nil) })
		case <-c.parent.confirm:
			// A lease was lowered: say so now, not at the next check.
			c.earlyExchange(ctx, &wg, early, int64(interval))
		case <-check.C():
			c.earlyExchange(ctx, &wg, early, int64(interval))
		}
	}
}

// earlyExchange starts an early exchange with the parent when one is due
// (EarlyDemand) and fewer than RegionEarlyInFlight are under way.
func (c *Coordinator) earlyExchange(ctx context.Context, wg *sync.WaitGroup, early chan struct{}, interval int64) {
	select {
	case early <- struct{}{}:
	default:
		return // as many under way as may be
	}
	now := c.now().UnixNano()
	demand := c.alloc.EarlyDemand(now, interval)
	if demand == nil {
		<-early
		return
	}
	wg.Go(func() {
		defer func() { <-early }()
		c.exchangeWithParent(ctx, now, demand)
	})
}

// exchangeWithParent sends one report to the parent, made at now, within
// an interval, and applies the answer: an early report of demand, or with
// demand nil the regular report of every tiered key.
func (c *Coordinator) exchangeWithParent(ctx context.Context, now int64, demand []*allotpb.KeyDemand) {
	interval := c.cfg.ParentInterval
	if demand == nil {
		demand = c.alloc.RegionDemand(now, int64(interval))
	}
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: allocator.RegionNode(c.cfg.Region), Incarnation: c.parent.incarnation,
		Region: c.cfg.Region, SentUnixNano: now, IntervalNano: int64(interval),
		RulesVersion: c.currentRules().Version(), Demand: demand, ReporterGroup: c.tierGroup(),
	}
	rctx, cancel := context.WithTimeout(ctx, interval)
	resp, err := c.parent.client.Report(rctx, req)
	cancel()
	p := c.parent
	if err != nil {
		if ctx.Err() != nil {
			return // leadership lost meanwhile
		}
		c.metrics.parentReports.WithLabelValues("failed").Inc()
		p.mu.Lock()
		first := p.lastErr == ""
		p.lastErr = err.Error()
		p.mu.Unlock()
		if first {
			c.log.Warn("the parent cluster did not answer; leases from it hold until they expire, then the static fractions apply", "parent", c.cfg.Parent, "error", err)
		}
		return
	}
	c.metrics.parentReports.WithLabelValues("ok").Inc()
	c.parent.client.Learn(resp.GetCoordinators())
	at := c.now().UnixNano()
	if c.alloc.ApplyParent(resp, at) {
		select {
		case p.confirm <- struct{}{}:
		default:
		}
	}
	p.mu.Lock()
	if p.lastErr != "" {
		c.log.Info("the parent cluster answers again", "parent", c.cfg.Parent)
	}
	p.lastOK, p.lastErr = max(p.lastOK, at), ""
	p.mu.Unlock()
}

// tierStatus is the cluster's part in the tier, for Status; nil when it
// has none.
func (c *Coordinator) tierStatus(now int64) *allotpb.TierStatus {
	switch {
	case c.cfg.Global:
		st := &allotpb.TierStatus{Role: "parent"}
		if c.leading.Load() {
			st.Regions = c.alloc.RegionsHeard()
		}
		return st
	case c.parent != nil:
		st := &allotpb.TierStatus{Role: "region", Parent: c.cfg.Parent}
		c.parent.mu.Lock()
		st.LastOkUnixNano, st.LastError = c.parent.lastOK, c.parent.lastErr
		c.parent.mu.Unlock()
		if c.leading.Load() {
			leased, fallback := c.alloc.TierCounts(now)
			st.LeasedKeys, st.FallbackKeys = uint32(leased), uint32(fallback)
		}
		return st
	}
	return nil
}

// grantFlushEvery is how often a region's leader records what it counted
// of its leases in the ledger: a leader lost loses at most this much of
// the record (grants are a record for the bill, not what enforces).
const grantFlushEvery = 5 * time.Second

// grantRecorder is a region leader's record of its leases from the
// parent, for the bill: what each tenant was allowed in the region, per
// billing window, proposed to the ledger every grantFlushEvery.
type grantRecorder struct {
	acc       map[allocator.GrantKey]float64
	last      int64 // ns: counted up to here
	lastFlush int64
	epoch     uint64 // the leader's epoch and its commands' numbers
	seq       uint64
	// pending is a command proposed and not known applied: it is retried
	// as it is, so that one applied twice is recognised and skipped.
	pending *fsmpb.GrantsCommand
}

func newGrantRecorder(epoch uint64, now int64) *grantRecorder {
	return &grantRecorder{acc: map[allocator.GrantKey]float64{}, last: now, lastFlush: now, epoch: epoch}
}

// recordGrants counts the leases up to now and, every grantFlushEvery,
// proposes what was counted.
func (c *Coordinator) recordGrants(g *grantRecorder, now int64, window, round time.Duration) {
	c.alloc.MeterGrants(g.acc, g.last, now, int64(window), int64(4*round))
	g.last = now
	if now-g.lastFlush < int64(grantFlushEvery) {
		return
	}
	g.lastFlush = now
	if g.pending == nil && len(g.acc) > 0 {
		g.seq++
		cmd := &fsmpb.GrantsCommand{Epoch: g.epoch, Seq: g.seq, Region: c.cfg.Region, ProposedUnixNano: now}
		for k, v := range g.acc {
			cmd.Grants = append(cmd.Grants, &fsmpb.GrantRecord{Tenant: k.Tenant, Rule: k.Rule, WindowUnix: k.Window, Granted: v})
		}
		slices.SortFunc(cmd.Grants, func(x, y *fsmpb.GrantRecord) int {
			return cmp.Or(cmp.Compare(x.GetWindowUnix(), y.GetWindowUnix()), cmp.Compare(x.GetTenant(), y.GetTenant()), cmp.Compare(x.GetRule(), y.GetRule()))
		})
		g.pending = cmd
		clear(g.acc)
	}
	if g.pending == nil {
		return
	}
	if _, err := c.apply(c.ctx, state.CmdGrants|state.Ignorable, g.pending, 5*time.Second); err != nil {
		c.log.Warn("could not record the parent's grants in the ledger; retrying", "error", err)
		return
	}
	g.pending = nil
}
