package allocator

import (
	"fmt"
	"time"

	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/proto/rulespb"
	"github.com/allot-io/allot/rules"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What the leader and the Engine both answer a report with: the bounds a
// report is checked against, the demand a shard group divides, and the
// answer built from the replicated state and the allocator's count of
// the fleet. One copy, so that the simulator's answers are the leader's.

// Defaults the coordinator's configuration and the Engine share.
const (
	// DefaultReportInterval is how often agents report.
	DefaultReportInterval = time.Second
	// DefaultBillingWindow is the ledger's window.
	DefaultBillingWindow = state.DefaultBillingWindow
	// DefaultMaxReportKeys bounds the entries of one report.
	DefaultMaxReportKeys = 200_000
	// DefaultLeaseIntervals is a lease's length in report intervals, when
	// the lease TTL is not set; a new leader learns for as long.
	DefaultLeaseIntervals = 5
	// MaxUsageAge is how old a usage count's billing window may be when
	// the ledger keeps everything: a report with a count for an older
	// window is refused. With a retention, the retention bounds it.
	MaxUsageAge = 400 * 24 * time.Hour
	// MaxClockAhead is how far ahead of the coordinator's clock a usage
	// count's billing window may start.
	MaxClockAhead = time.Hour
)

// Settings are what every member must agree on, replicated through
// SettingsCommand: the billing window cuts the ledger, and the report
// interval and lease TTL are what agents are told, what the allocator
// divides by, and how long a new leader learns. They are fixed from the
// configuration of the leader that first finds them unset (the cluster's
// first leader, or for a cluster from an older version, its first leader
// that knows them) and never change; a member whose flags differ uses the
// cluster's and says so once.
type Settings struct {
	BillingWindow, ReportInterval, LeaseTTL time.Duration
}

// SettingsOr returns the replicated settings fixed (state.Settings), each
// taken from def while not fixed yet.
func SettingsOr(fixed state.Settings, def Settings) Settings {
	out := def
	if fixed.BillingWindow != 0 {
		out.BillingWindow = fixed.BillingWindow
	}
	if fixed.ReportInterval != 0 {
		out.ReportInterval = fixed.ReportInterval
	}
	if fixed.LeaseTTL != 0 {
		out.LeaseTTL = fixed.LeaseTTL
	}
	return out
}

// overridesPerReport bounds the override changes one report answer
// carries: an agent far behind (a million overrides imported) catches up
// over several intervals, each answer a few MB at most.
const overridesPerReport = 20_000

// resetsPerReport bounds the resets one report answer carries: an agent
// far behind catches up over a few intervals.
const resetsPerReport = 1000

// Take folds into the allocator, at now, a report whose usage is
// committed: the demand this group divides (ownDemand), with the
// per-tenant overrides as the state stands. v is the state as the report
// reads it, one view for the whole report (state.View), and home says
// this group is its region's home group. The leader and the Engine both
// take reports by it; when the result is Stale, the answer waits for the
// next round, then Reply builds it.
func (a *Allocator) Take(v *state.View, home bool, req *allotpb.ReportRequest, now int64) *Folded {
	own := ownDemand(v, home, req)
	a.overrides.sync(v)
	return a.fold(own, now)
}

// Reply is the answer at now to a report Take folded in: its leases from
// the pools' divisions as they stand (answer), and from the state as the
// report reads it, v, the acknowledgement (acked when applied, else the
// last batch the state recorded), the cluster's settings (def for any not
// fixed yet) and the rules when the agent's are out of date.
func (a *Allocator) Reply(v *state.View, f *Folded, now time.Time, def Settings, applied bool, acked uint64) *allotpb.ReportResponse {
	leases := a.answer(f, now.UnixNano())
	return respond(v, a, f.req, now, def, leases, applied, acked)
}

// respond builds the answer to a report from the replicated state: the
// leases, the acknowledgement, the cluster's settings (def for any not
// fixed yet), and the rules when the agent's are out of date.
func respond(st *state.View, alloc *Allocator, req *allotpb.ReportRequest, now time.Time, def Settings, leases []*allotpb.Lease, applied bool, acked uint64) *allotpb.ReportResponse {
	set := SettingsOr(st.Settings(), def)
	resp := &allotpb.ReportResponse{
		Protocol:            allotpb.ProtocolVersion_PROTOCOL_VERSION_1,
		Leases:              leases,
		ReportIntervalNano:  int64(set.ReportInterval),
		LeaseTtlNano:        int64(set.LeaseTTL),
		RenewUnixNano:       now.Add(set.LeaseTTL).UnixNano(),
		Nodes:               uint32(alloc.NodeCount(now.UnixNano())),
		AckedSeq:            acked,
		Epoch:               st.Epoch(),
		BillingWindowNano:   int64(set.BillingWindow),
		RulesVersion:        st.Rules().Version(),
		CoordinatorUnixNano: now.UnixNano(),
		Group:               st.Group(),
		ShardMapVersion:     st.ShardMapVersion(),
	}
	if !applied {
		if seq, ok := st.LastSeq(req.GetNode(), req.GetIncarnation()); ok {
			resp.AckedSeq = seq
		}
	}
	if req.GetRulesVersion() != st.Rules().Version() {
		resp.Rules = rulespb.SetToProto(st.Rules())
	}
	resp.Overrides = st.OverridesSince(req.GetOverridesVersion(), overridesPerReport)
	// An agent not yet following the resets is a new process, whose state
	// is younger than the resets kept: it takes the version alone.
	resp.Resets = st.ResetsSince(req.GetResetsVersion(), resetsPerReport, !req.GetResetsFollowing())
	for _, m := range st.Members() {
		resp.Coordinators = append(resp.Coordinators, m.GetGrpcAddress())
	}
	return resp
}

// ReportError turns a report's violations into one INVALID_ARGUMENT
// status with a BadRequest that lists each of them, its field naming the
// entry ("usage.counts[3].tenant", "demand[0].key"), so that an agent can
// drop exactly the entries refused and send the rest again. nil when there
// are none.
func ReportError(vs []allotpb.Violation) error {
	if len(vs) == 0 {
		return nil
	}
	fvs := make([]*errdetails.BadRequest_FieldViolation, len(vs))
	for i, v := range vs {
		fvs[i] = &errdetails.BadRequest_FieldViolation{Field: v.Field, Description: v.Description}
	}
	msg := vs[0].Field + ": " + vs[0].Description
	if len(vs) > 1 {
		msg = fmt.Sprintf("%s (and %d more violations, listed in the BadRequest details)", msg, len(vs)-1)
	}
	st := status.New(codes.InvalidArgument, msg)
	if d, err := st.WithDetails(&errdetails.BadRequest{FieldViolations: fvs}); err == nil {
		st = d
	}
	return st.Err()
}

// ownDemand is req with the demand this group does not divide left out:
// keys of slots it does not own, and global rules' classes outside the
// home group. req itself is not changed.
func ownDemand(st *state.View, home bool, req *allotpb.ReportRequest) *allotpb.ReportRequest {
	if home && st.Group() == "" {
		return req
	}
	rs := st.Rules()
	owns := st.Owner()
	keep := make([]*allotpb.KeyDemand, 0, len(req.GetDemand()))
	for _, d := range req.GetDemand() {
		if r, ok := rs.Get(d.GetRule()); ok && r.Scope == rules.Global {
			if home {
				keep = append(keep, d)
			}
			continue
		}
		if owns(shard.Of(d.GetTenant())) {
			keep = append(keep, d)
		}
	}
	if len(keep) == len(req.GetDemand()) {
		return req
	}
	out := allotpb.ReportHeader(req)
	out.Usage, out.Demand = req.GetUsage(), keep
	return out
}

// ReportLimits are the bounds a report must keep: at most maxKeys
// entries, and usage in billing windows from what retention still keeps
// (or MaxUsageAge when the ledger keeps everything, retention ≤ 0) up to
// MaxClockAhead after now.
func ReportLimits(maxKeys int, maxUnits float64, retention, billingWindow time.Duration, now time.Time) allotpb.ReportLimits {
	age := retention
	if age <= 0 {
		age = MaxUsageAge
	}
	// A window whose end is within the retention is kept: its start may
	// be a window earlier.
	lo, hi := allotpb.WindowBounds(now, age+billingWindow, MaxClockAhead)
	return allotpb.ReportLimits{MaxKeys: maxKeys, MinWindowUnix: lo, MaxWindowUnix: hi,
		NowUnixNano: now.UnixNano(), MaxSkew: MaxClockAhead, MaxUnitsPerSecond: maxUnits, BillingWindow: billingWindow}
}

// DefaultRoundInterval is the round interval a report interval has unless
// RoundInterval sets one: a quarter of it, at most 250 ms. A report whose
// pools changed waits for the next round for its answer (Allocator.Take),
// so the round interval bounds that wait; each round costs the claims of
// the pools it divides, so four an interval keep an interval's work at
// four times what was reported.
func DefaultRoundInterval(report time.Duration) time.Duration {
	return max(min(report/4, 250*time.Millisecond), time.Millisecond)
}
