package coordinator

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/allot-io/allot/coordinator/clusterclient"
	allotpb "github.com/allot-io/allot/proto"
)

// parentLink is a region cluster's side of the tier: its leader reports
// the region's demand to the parent every ParentInterval and applies the
// leases that come back (tier.go). Followers keep the link idle.
type parentLink struct {
	client      *clusterclient.Client
	incarnation uint64 // drawn per process, as an agent's

	mu      sync.Mutex
	lastOK  int64  // ns, this cluster's clock
	lastErr string // the last exchange's error, "" when it was answered
}

func newParentLink(cfg *Config, onError func(error)) (*parentLink, error) {
	opts, err := clusterclient.DialOptions(nil, cfg.ParentCredentials, onError)
	if err != nil {
		return nil, err
	}
	return &parentLink{client: clusterclient.New(cfg.Parent, opts), incarnation: rand.Uint64()}, nil
}

// reportToParent runs the leader's exchanges with the parent until ctx
// ends (leadership lost, or shutdown).
func (c *Coordinator) reportToParent(ctx context.Context) {
	// A new leader holds no lease from the parent: until its first
	// exchange it divides the static fractions.
	c.alloc.parent.mu.Lock()
	clear(c.alloc.parent.m)
	c.alloc.parent.mu.Unlock()
	c.exchangeWithParent(ctx)
	t := time.NewTicker(c.cfg.ParentInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.exchangeWithParent(ctx)
		}
	}
}

// exchangeWithParent sends one report to the parent, within an interval,
// and applies the answer.
func (c *Coordinator) exchangeWithParent(ctx context.Context) {
	interval := c.cfg.ParentInterval
	now := c.now().UnixNano()
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: RegionNode(c.cfg.Region), Incarnation: c.parent.incarnation,
		Region: c.cfg.Region, SentUnixNano: now, IntervalNano: int64(interval),
		RulesVersion: c.currentRules().Version(), Demand: c.alloc.regionDemand(now, int64(interval)),
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
	c.alloc.applyParent(resp, at)
	p.mu.Lock()
	if p.lastErr != "" {
		c.log.Info("the parent cluster answers again", "parent", c.cfg.Parent)
	}
	p.lastOK, p.lastErr = at, ""
	p.mu.Unlock()
}

// tierStatus is the cluster's part in the tier, for Status; nil when it
// has none.
func (c *Coordinator) tierStatus(now int64) *allotpb.TierStatus {
	switch {
	case c.cfg.Global:
		st := &allotpb.TierStatus{Role: "parent"}
		if c.leading.Load() {
			st.Regions = c.alloc.regionsHeard()
		}
		return st
	case c.parent != nil:
		st := &allotpb.TierStatus{Role: "region", Parent: c.cfg.Parent}
		c.parent.mu.Lock()
		st.LastOkUnixNano, st.LastError = c.parent.lastOK, c.parent.lastErr
		c.parent.mu.Unlock()
		if c.leading.Load() {
			leased, fallback := c.alloc.tierCounts(now)
			st.LeasedKeys, st.FallbackKeys = uint32(leased), uint32(fallback)
		}
		return st
	}
	return nil
}
