package coordinator

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/allot-io/allot/coordinator/internal/authz"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/auth"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// balanceServer answers a tenant's balance: what a customer's dashboard
// shows of its own usage (docs/billing.md#balance). Any member answers,
// from its memory, without a call to the leader or the ledger sink.
type balanceServer struct {
	allotpb.UnimplementedBalanceServiceServer
	c *Coordinator
}

// GetBalance answers the balance of the tenant the request names, if
// the caller may read it. A caller with the balance role may read its
// own tenant's alone: any other is PERMISSION_DENIED with the same
// message whether or not the tenant has usage, so that the refusal tells
// it nothing of other tenants.
func (s *balanceServer) GetBalance(ctx context.Context, req *allotpb.BalanceRequest) (*allotpb.BalanceResponse, error) {
	if req.GetTenant() == "" {
		return nil, invalid("tenant", "is required")
	}
	p, _ := peer.FromContext(ctx)
	if err := s.c.authz.MayReadBalance(p, "GetBalance", authz.Identity(ctx), req.GetTenant()); err != nil {
		return nil, status.Error(codes.PermissionDenied, err.Error())
	}
	return s.c.balance(req.GetTenant(), req.GetPlan()), nil
}

// overrideOf is tenant's override of r from the API, as agents apply it
// at now: none once expired, though not yet swept.
func overrideOf(st *state.State, r *rules.Rule, tenant string, now time.Time) (rules.TenantOverride, bool) {
	o, ok := st.Override(r.Name, tenant)
	if !ok || o.GetExpiresUnixNano() != 0 && o.GetExpiresUnixNano() <= now.UnixNano() {
		return rules.TenantOverride{}, false
	}
	return rulespb.OverrideFromProto(o).TenantOverride, true
}

// hasBalance reports whether r has a balance to show tenant: it limits
// the tenant's own total over a cycle the ledger can count. Left out are
// rules keyed by anything but the tenant alone (a global rule's limit is
// the whole service's, a user or route rule's each user's or route's),
// local rules (each node's), unlimited and shadow rules (which refuse
// nothing), rules whose match leaves the tenant or the given plan out,
// and rules whose period is not a whole number of billing windows of
// width (seconds): the ledger counts by billing window, so a
// per-second rate has no cycle it can count.
func hasBalance(r *rules.Rule, tenant, plan string, width int64) bool {
	switch {
	case r.Local || r.Unlimited || r.Shadow || r.Period <= 0 || width <= 0:
		return false
	case r.Cycle == nil && r.Period%(time.Duration(width)*time.Second) != 0:
		return false
	case r.Cycle != nil && (24*time.Hour)%(time.Duration(width)*time.Second) != 0:
		return false // a calendar cycle starts at a midnight
	case len(r.Match.Tenants) > 0 && !slices.Contains(r.Match.Tenants, tenant):
		return false
	case plan != "" && len(r.Match.Plans) > 0 && !slices.Contains(r.Match.Plans, plan):
		return false
	}
	key := r.KeyAttrs()
	return len(key) == 1 && key[0] == rules.AttrTenant
}

// limitIn is the limit in force for tenant under r and where it comes
// from, with the override o from the API when ok: as agents and the
// leader apply it (rules.Rule.LimitWith). known is false when the limit
// depends on a plan the caller did not give: the rule's plans set limits
// and neither an override nor the rule file's tenants section sets the
// tenant's.
func limitIn(r *rules.Rule, o rules.TenantOverride, ok bool, tenant, plan string) (limit int64, from string, known bool) {
	switch {
	case ok && o.Limit > 0:
		from = "override"
	case r.Tenants[tenant].Limit > 0:
		from = "tenant"
	case r.Plans[plan].Limit > 0:
		from = "plan"
	case plan == "" && slices.ContainsFunc(slices.Collect(maps.Values(r.Plans)), func(p rules.Plan) bool { return p.Limit > 0 }):
		return 0, "", false
	default:
		from = "rule"
	}
	return r.LimitWith(o, ok, tenant, plan), from, true
}

// balance reads tenant's balance from this member's state, in one read
// of it under the FSM's read lock. What the tenant used in a rule's final
// windows comes from c.sums while the range's final windows are the same;
// otherwise, and for the open windows always, from the ledger: a seek per
// window read (state.TenantUsage).
func (c *Coordinator) balance(tenant, plan string) *allotpb.BalanceResponse {
	now := c.now()
	resp := &allotpb.BalanceResponse{Tenant: tenant, At: timestamppb.New(now), ReportInterval: durationpb.New(c.cfg.ReportInterval)}
	c.fsm.Read(func(st *state.State) {
		width := st.BillingWindowSeconds()
		if iv := st.Settings().ReportInterval; iv > 0 {
			resp.ReportInterval = durationpb.New(iv)
		}
		// held is the first window start the state is sure to hold all
		// of: later than what was exported to the sink, and than what
		// retention may have dropped.
		held := int64(-1 << 62)
		if pos := st.Exported(); pos.Set {
			held = pos.Last.Window + width
		}
		if r := c.cfg.LedgerRetention; r > 0 {
			held = max(held, ceilDiv(now.Add(-r).Unix(), width)*width)
		}
		type counted struct {
			i       int
			key     finalKey
			finals  int   // final windows in the range
			through int64 // the last one's start
			// walk is where the final windows' sum is read from the
			// ledger on: the range's start, after the windows a kept sum
			// covers, or its end when the kept sum is whole.
			walk        int64
			final, open uint64
		}
		var (
			out      []counted
			from, to = int64(1<<63 - 1), int64(-1 << 63)
			walkFrom = int64(1<<63 - 1)
			walkTo   = int64(-1 << 63)
		)
		set := st.Rules().Rules()
		for i := range set {
			r := &set[i]
			if !hasBalance(r, tenant, plan, width) {
				continue
			}
			o, ok := overrideOf(st, r, tenant, now)
			start, end := r.CycleAt(o, ok, tenant, plan, now)
			cr := counted{i: i, key: finalKey{tenant: tenant, rule: r.Name, from: max(start.Unix(), held), to: end.Unix()}}
			cr.finals, cr.through = st.FinalIn(cr.key.from, cr.key.to)
			cr.walk = cr.key.from
			if v, ok := c.sums.get(st, cr.key); ok {
				if v.windows == cr.finals {
					cr.final, cr.walk = v.used, cr.key.to
				} else if before, _ := st.FinalIn(cr.key.from, v.through+1); before == v.windows {
					// The windows final since are all after the kept sum's.
					cr.final, cr.walk = v.used, v.through+1
				}
			}
			if cr.walk < cr.key.to {
				walkFrom, walkTo = min(walkFrom, cr.walk), max(walkTo, cr.key.to)
			}
			out = append(out, cr)
			from, to = min(from, cr.key.from), max(to, cr.key.to)
		}
		if len(out) == 0 {
			return
		}
		byRule := make(map[string]int, len(out))
		for j, cr := range out {
			byRule[set[cr.i].Name] = j
		}
		// in finds the rule a line counts under, if it is in its range.
		in := func(rule string, window int64) (*counted, bool) {
			j, ok := byRule[rule]
			if !ok || window < out[j].key.from || window >= out[j].key.to {
				return nil, false
			}
			return &out[j], true
		}
		if walkFrom < walkTo {
			st.TenantUsage(tenant, walkFrom, walkTo, func(rule string, window int64, admitted uint64) {
				if cr, ok := in(rule, window); ok && window >= cr.walk && st.IsFinal(window) {
					cr.final = allotpb.SaturatingAdd(cr.final, admitted)
				}
			})
			for _, cr := range out {
				if cr.walk < cr.key.to {
					c.sums.put(st, cr.key, finalSum{windows: cr.finals, through: cr.through, used: cr.final})
				}
			}
		}
		st.OpenIn(from, to, func(w int64) {
			st.TenantUsage(tenant, w, w+1, func(rule string, window int64, admitted uint64) {
				if cr, ok := in(rule, window); ok {
					cr.open = allotpb.SaturatingAdd(cr.open, admitted)
				}
			})
		})
		for _, cr := range out {
			r := &set[cr.i]
			to, ok := overrideOf(st, r, tenant, now)
			start, end := r.CycleAt(to, ok, tenant, plan, now)
			used := allotpb.SaturatingAdd(cr.final, cr.open)
			rb := &allotpb.RuleBalance{
				Rule: r.Name, Period: durationpb.New(r.Period), CycleStart: timestamppb.New(start), RenewsAt: timestamppb.New(end),
				Used: used, CountedFrom: timestamppb.New(time.Unix(cr.key.from, 0).UTC()), Complete: cr.key.from == start.Unix(),
			}
			if limit, src, known := limitIn(r, to, ok, tenant, plan); known {
				rem := uint64(0)
				if limit > 0 && uint64(limit) > used {
					rem = uint64(limit) - used
				}
				rb.Limit, rb.LimitFrom, rb.Remaining = &limit, src, &rem
			}
			if r.Overage != nil {
				// The state's tally of the cycle holds its overage whole,
				// as the ledger's lines count it, even when those lines
				// have left memory for the sink.
				rb.Overage = st.CycleOverage(r.Name, tenant, start.Unix())
			}
			resp.Rules = append(resp.Rules, rb)
		}
	})
	slices.SortFunc(resp.Rules, func(a, b *allotpb.RuleBalance) int { return strings.Compare(a.GetRule(), b.GetRule()) })
	return resp
}

// ceilDiv is a ÷ b rounded up, for b > 0.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a > 0 {
		q++
	}
	return q
}

// balanceHTTP answers GET /v1/balance?tenant=T[&plan=P]. With credentials
// configured it needs the reader role, or the balance role of tenant T:
// a balance credential asking for another tenant is refused 403, with
// the same body whether or not that tenant has usage.
func (c *Coordinator) balanceHTTP(w http.ResponseWriter, r *http.Request) {
	a := c.authz
	var id auth.Identity
	p := &peer.Peer{Addr: remoteAddr(r.RemoteAddr)}
	if a.Enabled() {
		var reason string
		id, reason = a.Identify(r.Header.Values("Authorization"), r.TLS)
		switch {
		case reason != "":
			a.Refuse(p, "http:balance", reason, "")
			w.Header().Set("WWW-Authenticate", `Bearer realm="allot"`)
			writeError(w, http.StatusUnauthorized, errors.New("authentication required: present a valid bearer token or client certificate"))
			return
		case !id.Permits(auth.Reader | auth.Balance):
			a.Refuse(p, "http:balance", authz.ReasonWrongRole, id.Name())
			writeError(w, http.StatusForbidden, errors.New("permission denied: this endpoint needs the reader or balance role"))
			return
		}
	}
	q := r.URL.Query()
	tenant := q.Get("tenant")
	if tenant == "" {
		writeError(w, http.StatusBadRequest, errors.New("tenant: is required (/v1/balance?tenant=T)"))
		return
	}
	if err := a.MayReadBalance(p, "http:balance", id, tenant); err != nil {
		writeError(w, http.StatusForbidden, err)
		return
	}
	writeProto(w, http.StatusOK, c.balance(tenant, q.Get("plan")))
}

// finalSums remembers what a tenant used under a rule in the final
// windows of a range: the part of a balance that cannot change. A final
// window's lines never change, and windows only become final, so the sum
// stands for as long as the count of final windows in the range does; a
// balance then reads only the open windows (one or two) instead of a seek
// per window of the cycle, 720 for a month of hourly windows.
//
// It is this member's, not replicated, and answers only for the state it
// was read from: a restore swaps in another state, and the sums are
// forgotten. It holds at most maxFinalSums entries, forgotten all at once
// when full: a sum is one walk of the tenant's cycle to make again.
type finalSums struct {
	mu sync.Mutex
	// of is the state the sums were read from; weak, so that the sums do
	// not keep a replaced state's ledger in memory.
	of weak.Pointer[state.State]
	m  map[finalKey]finalSum
}

// finalKey is a tenant's rule over the windows starting in [from, to).
type finalKey struct {
	tenant, rule string
	from, to     int64
}

// finalSum is the admitted sum over the final windows of a range, how
// many final windows the range held when it was read, and the last one's
// start. Windows become final in order, mostly: when those up to through
// are still windows in number, the ones added since are all later, and
// only they are read.
type finalSum struct {
	windows int
	through int64
	used    uint64
}

const maxFinalSums = 100_000

// get returns the sum for k read from st, if one is kept.
func (f *finalSums) get(st *state.State, k finalKey) (finalSum, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.of != weak.Make(st) {
		return finalSum{}, false
	}
	v, ok := f.m[k]
	return v, ok
}

// put keeps the sum for k read from st.
func (f *finalSums) put(st *state.State, k finalKey, v finalSum) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := weak.Make(st); f.of != p || f.m == nil || len(f.m) >= maxFinalSums {
		f.of, f.m = p, make(map[finalKey]finalSum)
	}
	f.m[k] = v
}
