package coordinator

import (
	_ "embed"
	"encoding/json"
	allotpb "github.com/allot-io/allot/proto"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/httproute"
	"github.com/allot-io/allot/rules"
)

// The status page: /ui is one HTML file with its script and styles in it
// (no build step), which polls /v1/ui every two seconds and draws the
// cluster, the rules, a chart per rule of each busy tenant's admissions
// against its allowance, how the busiest keys are divided among the
// gateways, the gateways heard from, and the billing windows. The page
// itself holds no data and is open; /v1/ui needs the reader role when
// credentials are configured (the page asks for a token and keeps it for
// the tab).

//go:embed ui/index.html
var uiPage []byte

// uiState is what /v1/ui answers.
type uiState struct {
	Now      time.Time            `json:"now"`
	Region   string               `json:"region"`
	Member   string               `json:"member"`
	Leader   string               `json:"leader"`
	Leading  bool                 `json:"leading"`
	Term     uint64               `json:"term"`
	Epoch    uint64               `json:"epoch"`
	Learning bool                 `json:"learning"`
	Members  []uiMember           `json:"members"`
	Rules    []uiRule             `json:"rules"`
	Usage    []uiUsage            `json:"usage"`
	Pools    []allocator.PoolView `json:"pools"`
	Agents   []allocator.NodeView `json:"agents"`
	Windows  uiWindows            `json:"windows"`
	Tier     *tierSummary         `json:"tier,omitempty"`
	// Shards is the member's shard group; absent for a region never split.
	Shards *allotpb.ShardStatus `json:"shards,omitempty"`
	// Export is the export to the ledger sink; absent without one.
	Export     *uiExport     `json:"ledger_export,omitempty"`
	WindowSecs int64         `json:"window_seconds"`
	LeaseTTL   time.Duration `json:"lease_ttl_ns"`
}

type uiMember struct {
	ID     string `json:"id"`
	GRPC   string `json:"grpc"`
	Leader bool   `json:"leader"`
	Voter  bool   `json:"voter"`
}

type uiRule struct {
	Name      string  `json:"name"`
	Scope     string  `json:"scope"`
	Algorithm string  `json:"algorithm"`
	Limit     int64   `json:"limit"`
	PeriodSec float64 `json:"period_seconds"`
	Intent    string  `json:"intent"`
	// Per says what one allowance covers: "all tenants" (a global rule,
	// shared), "each tenant", "each gateway" (a local rule), or "each"
	// and the key's attributes ("each tenant+user"); empty for an
	// unlimited rule.
	Per    string `json:"per"`
	Shadow bool   `json:"shadow,omitempty"`
}

// uiUsage is one ledger line of the current billing window.
type uiUsage struct {
	Tenant   string `json:"tenant"`
	Rule     string `json:"rule"`
	Region   string `json:"region"`
	Window   int64  `json:"window"`
	Admitted uint64 `json:"admitted"`
	Denied   uint64 `json:"denied"`
	// Allowance is the line's allowance per second, of what its rule's
	// Per names: the tenant's own (its override, or on the leader the
	// limit its key is divided by, plan and parent lease included), the
	// one all tenants share, or one key's. 0 for an unlimited rule.
	Allowance float64 `json:"allowance_per_second"`
}

type uiWindows struct {
	Open      []uiOpenWindow `json:"open"`
	Final     int            `json:"final"`
	LastFinal int64          `json:"last_final"`
}

type uiOpenWindow struct {
	Start     int64 `json:"start"`
	Reporters int   `json:"reporters"`
}

type tierSummary struct {
	Role         string `json:"role"`
	LastError    string `json:"last_error,omitempty"`
	LeasedKeys   uint32 `json:"leased_keys"`
	FallbackKeys uint32 `json:"fallback_keys"`
	Regions      int    `json:"regions"`
}

// uiExport is the export to the ledger sink (docs/billing.md): what the
// member holds and the cluster exported and, on the leader while export
// rounds fail, the failure (allotpb.LedgerStatus).
type uiExport struct {
	InMemory      uint64     `json:"lines_in_memory"`
	Exported      uint64     `json:"exported_lines"`
	ThroughWindow int64      `json:"exported_through_window,omitempty"`
	Error         string     `json:"error,omitempty"`
	Cause         string     `json:"cause,omitempty"`
	FailingSince  *time.Time `json:"failing_since,omitempty"`
	LastFailure   *time.Time `json:"last_failure,omitempty"`
	Failures      uint64     `json:"failures,omitempty"`
}

func uiExportOf(l *allotpb.LedgerStatus) *uiExport {
	if !l.GetSink() {
		return nil
	}
	x := &uiExport{InMemory: l.GetLines(), Exported: l.GetExportedLines(), Error: l.GetExportError(), Cause: l.GetExportErrorCause(), Failures: l.GetExportFailures()}
	if w := l.GetExportedThroughWindow(); w != nil {
		x.ThroughWindow = w.GetSeconds()
	}
	if ts := l.GetExportFailingSince(); ts != nil {
		t := ts.AsTime()
		x.FailingSince = &t
	}
	if ts := l.GetExportLastFailure(); ts != nil {
		t := ts.AsTime()
		x.LastFailure = &t
	}
	return x
}

// uiPools and uiUsageLines bound what /v1/ui sends: the busiest.
const (
	uiPools      = 12
	uiUsageLines = 60
)

// uiState gathers the page's data: the cluster as this member sees it,
// and, on the leader, the divisions and gateways only it knows.
func (c *Coordinator) uiState() *uiState {
	now := c.now()
	st := c.Status()
	u := &uiState{Now: now, Region: c.cfg.Region, Member: c.cfg.NodeID, Leader: st.GetLeaderId(), Leading: c.leading.Load(),
		Term: st.GetTerm(), Epoch: st.GetEpoch(), Learning: st.GetLearning(), LeaseTTL: c.alloc.LeaseTTL()}
	for _, m := range st.GetMembers() {
		u.Members = append(u.Members, uiMember{ID: m.GetId(), GRPC: m.GetGrpcAddress(), Leader: m.GetLeader(), Voter: m.GetVoter()})
	}
	ruleSet := c.currentRules()
	for _, r := range ruleSet.Rules() {
		u.Rules = append(u.Rules, uiRule{Name: r.Name, Scope: r.Scope.String(), Algorithm: r.Algorithm.String(), Limit: r.Limit,
			PeriodSec: r.Period.Seconds(), Intent: r.Intent.String(), Per: allowancePer(&r), Shadow: r.Shadow})
	}
	u.Shards = st.GetShards()
	u.Export = uiExportOf(st.GetLedger())
	if t := st.GetTier(); t != nil {
		u.Tier = &tierSummary{Role: t.GetRole(), LastError: t.GetLastError(), LeasedKeys: t.GetLeasedKeys(), FallbackKeys: t.GetFallbackKeys(), Regions: len(t.GetRegions())}
	}
	c.fsm.Read(func(s *state.State) {
		u.WindowSecs = s.BillingWindowSeconds()
		current := now.Unix() / u.WindowSecs * u.WindowSecs
		for _, w := range s.OpenWindows() {
			u.Windows.Open = append(u.Windows.Open, uiOpenWindow{Start: w.Start, Reporters: len(w.Reporters)})
		}
		for _, w := range s.FinalWindows() {
			u.Windows.Final++
			u.Windows.LastFinal = max(u.Windows.LastFinal, w)
		}
		lines, _, _ := s.LedgerPage(state.LedgerQuery{From: current, To: current + 1}, nil, math.MaxInt, math.MaxInt)
		for _, l := range lines {
			k := l.Key
			u.Usage = append(u.Usage, uiUsage{Tenant: k.Tenant, Rule: k.Rule, Region: k.Region, Window: k.Window, Admitted: l.Admitted, Denied: l.Denied})
		}
	})
	slices.SortFunc(u.Windows.Open, func(a, b uiOpenWindow) int { return int(b.Start - a.Start) })
	slices.SortFunc(u.Usage, func(a, b uiUsage) int { return int(int64(b.Admitted+b.Denied) - int64(a.Admitted+a.Denied)) })
	u.Usage = u.Usage[:min(len(u.Usage), uiUsageLines)]
	for i := range u.Usage {
		if r, ok := ruleSet.Get(u.Usage[i].Rule); ok {
			u.Usage[i].Allowance = c.uiAllowance(&r, u.Usage[i].Tenant, u.Usage[i].Region, u.Leading)
		}
	}
	if u.Leading {
		u.Pools, u.Agents = c.alloc.Divisions(now.UnixNano(), uiPools)
	}
	return u
}

// allowancePer says what one of a rule's allowances covers (uiRule.Per).
func allowancePer(r *rules.Rule) string {
	switch {
	case r.Unlimited || r.Limit <= 0:
		return ""
	case r.Local:
		return "each gateway"
	case r.Fair():
		return "all tenants"
	}
	attrs := make([]string, 0, 4)
	for _, a := range r.KeyAttrs() {
		attrs = append(attrs, string(a))
	}
	return "each " + strings.Join(attrs, "+")
}

// uiAllowance is a ledger line's allowance per second (uiUsage.Allowance).
// The leader knows the limit each pool of its own region is divided by
// (a plan's, a parent's lease); otherwise it is the rule's limit for the
// tenant (its override) and region.
func (c *Coordinator) uiAllowance(r *rules.Rule, tenant, region string, leading bool) float64 {
	if allowancePer(r) == "" || r.Period <= 0 {
		return 0
	}
	perSecond := func(units float64) float64 { return units / r.Period.Seconds() }
	if leading && region == c.cfg.Region && !r.Local && (r.Fair() || allocator.TenantKey(r)) {
		key := ""
		if !r.Fair() {
			key = string(rules.AppendKey(nil, tenant))
		}
		if limit, ok := c.alloc.PoolLimit(r.Name, key); ok {
			return perSecond(limit)
		}
	}
	if r.Fair() {
		return perSecond(r.RegionLimit(r.Limit, region))
	}
	return perSecond(r.RegionLimit(r.LimitFor(tenant, ""), region))
}

// uiHandlers adds /ui and /v1/ui to mux.
func (c *Coordinator) uiHandlers(mux *httproute.Mux) {
	page := func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:")
		_, _ = w.Write(uiPage)
	}
	mux.HandleFunc("GET /ui", page)
	mux.HandleFunc("GET /ui/", page)
	mux.Handle("GET /v1/ui", c.readerOnly("ui", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(c.uiState())
	})))
}
