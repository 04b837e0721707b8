package coordinator

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"slices"
	"time"
)

// The status page: /ui is one HTML file with its script and styles in it
// (no build step), which polls /v1/ui every two seconds and draws the
// cluster, the rules, each busy tenant's admissions against its
// allowance, how the busiest keys are divided among the gateways, the
// gateways heard from, and the billing windows. The page itself holds no
// data and is open; /v1/ui needs the reader role when credentials are
// configured (the page asks for a token and keeps it for the tab).

//go:embed ui/index.html
var uiPage []byte

// uiState is what /v1/ui answers.
type uiState struct {
	Now        time.Time     `json:"now"`
	Region     string        `json:"region"`
	Member     string        `json:"member"`
	Leader     string        `json:"leader"`
	Leading    bool          `json:"leading"`
	Term       uint64        `json:"term"`
	Epoch      uint64        `json:"epoch"`
	Learning   bool          `json:"learning"`
	Members    []uiMember    `json:"members"`
	Rules      []uiRule      `json:"rules"`
	Usage      []uiUsage     `json:"usage"`
	Pools      []uiPool      `json:"pools"`
	Agents     []uiAgent     `json:"agents"`
	Windows    uiWindows     `json:"windows"`
	Tier       *tierSummary  `json:"tier,omitempty"`
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
}

// uiUsage is one ledger line of the current billing window.
type uiUsage struct {
	Tenant   string `json:"tenant"`
	Rule     string `json:"rule"`
	Region   string `json:"region"`
	Window   int64  `json:"window"`
	Admitted uint64 `json:"admitted"`
	Denied   uint64 `json:"denied"`
}

// uiPool is one key's division among the gateways (leader only).
type uiPool struct {
	Rule      string    `json:"rule"`
	Key       string    `json:"key"`
	Limit     float64   `json:"limit"`
	Demand    float64   `json:"demand"`
	Contended bool      `json:"contended"`
	Claims    []uiClaim `json:"claims"`
}

type uiClaim struct {
	Node   string  `json:"node"`
	Lease  float64 `json:"lease"`
	Demand float64 `json:"demand"`
}

type uiAgent struct {
	Node     string    `json:"node"`
	Region   string    `json:"region"`
	LastSeen time.Time `json:"last_seen"`
	Silent   bool      `json:"silent"` // no report for a lease period: its rules are on their fail modes
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
		Term: st.GetTerm(), Epoch: st.GetEpoch(), Learning: st.GetLearning(), LeaseTTL: c.alloc.leaseTTL()}
	for _, m := range st.GetMembers() {
		u.Members = append(u.Members, uiMember{ID: m.GetId(), GRPC: m.GetGrpcAddress(), Leader: m.GetLeader(), Voter: m.GetVoter()})
	}
	for _, r := range c.currentRules().Rules() {
		u.Rules = append(u.Rules, uiRule{Name: r.Name, Scope: r.Scope.String(), Algorithm: r.Algorithm.String(), Limit: r.Limit,
			PeriodSec: r.Period.Seconds(), Intent: r.Intent.String()})
	}
	if t := st.GetTier(); t != nil {
		u.Tier = &tierSummary{Role: t.GetRole(), LastError: t.GetLastError(), LeasedKeys: t.GetLeasedKeys(), FallbackKeys: t.GetFallbackKeys(), Regions: len(t.GetRegions())}
	}
	c.fsm.read(func(s *state) {
		u.WindowSecs = s.billingWindowSeconds()
		current := now.Unix() / u.WindowSecs * u.WindowSecs
		for w, reporters := range s.open {
			u.Windows.Open = append(u.Windows.Open, uiOpenWindow{Start: w, Reporters: len(reporters)})
		}
		for w := range s.final {
			u.Windows.Final++
			u.Windows.LastFinal = max(u.Windows.LastFinal, w)
		}
		for k, v := range s.ledger {
			if k.window == current {
				u.Usage = append(u.Usage, uiUsage{Tenant: k.tenant, Rule: k.rule, Region: k.region, Window: k.window, Admitted: v.admitted, Denied: v.denied})
			}
		}
	})
	slices.SortFunc(u.Windows.Open, func(a, b uiOpenWindow) int { return int(b.Start - a.Start) })
	slices.SortFunc(u.Usage, func(a, b uiUsage) int { return int(int64(b.Admitted+b.Denied) - int64(a.Admitted+a.Denied)) })
	u.Usage = u.Usage[:min(len(u.Usage), uiUsageLines)]
	if u.Leading {
		u.Pools, u.Agents = c.alloc.uiDivisions(now.UnixNano(), uiPools)
	}
	return u
}

// uiDivisions is the busiest pools' division among nodes, and every node
// heard from, for the status page.
func (a *allocator) uiDivisions(now int64, n int) ([]uiPool, []uiAgent) {
	a.mu.Lock()
	names := make(map[int32]string, len(a.nodes))
	var agents []uiAgent
	ttl := a.ttl.Load()
	for name, info := range a.nodes {
		names[info.index] = name
		agents = append(agents, uiAgent{Node: name, Region: info.region, LastSeen: time.Unix(0, info.lastSeen), Silent: now-info.lastSeen > ttl})
	}
	a.mu.Unlock()
	slices.SortFunc(agents, func(x, y uiAgent) int { return compareStrings(x.Node, y.Node) })
	var pools []uiPool
	for i := range a.shards {
		sh := &a.shards[i]
		sh.mu.Lock()
		for k, p := range sh.pools {
			up := uiPool{Rule: k.rule, Key: k.key, Limit: p.limit, Contended: p.contended}
			for _, cl := range p.classes {
				for _, claim := range cl.claims {
					up.Demand += claim.est
					up.Claims = append(up.Claims, uiClaim{Node: names[claim.node], Lease: claim.grant, Demand: claim.est})
				}
			}
			pools = append(pools, up)
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(pools, func(x, y uiPool) int {
		switch {
		case x.Demand > y.Demand:
			return -1
		case x.Demand < y.Demand:
			return 1
		}
		return compareStrings(x.Rule+x.Key, y.Rule+y.Key)
	})
	return pools[:min(len(pools), n)], agents
}

// uiHandlers adds /ui and /v1/ui to mux.
func (c *Coordinator) uiHandlers(mux *http.ServeMux) {
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
