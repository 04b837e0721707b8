package envoy

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/rules"
)

// Bounds on what Envoy's configuration puts in a request (the number of
// descriptors and entries, the domain), beyond which it is refused as
// INVALID_ARGUMENT. Values, which clients control through headers, are
// never refused: gRPC's message size bounds them. envoyproxy/ratelimit has
// no bounds; Envoy's own configurations stay far below these.
const (
	// MaxDescriptors bounds the descriptors of one request.
	MaxDescriptors = 64
	// MaxEntries bounds the entries of one descriptor: a descriptor rule
	// matches at most as many.
	MaxEntries = rules.MaxDescriptorEntries
	// MaxDomainLen bounds the domain.
	MaxDomainLen = agent.MaxAttrLen
)

// Options configures a RateLimitServer.
type Options struct {
	// Headers adds RateLimit-Limit, RateLimit-Remaining and
	// RateLimit-Reset to every response Envoy sends, and Retry-After to
	// refusals (envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED).
	// Envoy can instead make x-ratelimit-* headers itself from the
	// statuses (the filter's enable_x_ratelimit_headers).
	Headers bool
}

// RateLimitServer serves envoy.service.ratelimit.v3.RateLimitService from
// an agent.
type RateLimitServer struct {
	rlsv3.UnimplementedRateLimitServiceServer
	a    *agent.Agent
	opts Options
}

// NewRateLimitServer returns a server answering from a.
func NewRateLimitServer(a *agent.Agent, opts Options) *RateLimitServer {
	return &RateLimitServer{a: a, opts: opts}
}

// Register registers the service on s.
func (s *RateLimitServer) Register(g *grpc.Server) { rlsv3.RegisterRateLimitServiceServer(g, s) }

// ShouldRateLimit decides a request's descriptors. A request without a
// domain or descriptors, or beyond the bounds above, is INVALID_ARGUMENT,
// which Envoy treats by its failure_mode_deny setting.
func (s *RateLimitServer) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	descs, err := descriptors(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	decisions := s.a.CheckDescriptors(req.GetDomain(), descs, int64(req.GetHitsAddend()), make([]agent.Decision, 0, len(descs)))
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(decisions))}
	tightest := -1
	for i, d := range decisions {
		st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		if !d.Allowed {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if d.Limit > 0 || d.Period > 0 { // a limit of 0 requests is one too
			st.CurrentLimit = currentLimit(d)
			st.LimitRemaining = uint32(min(max(d.Remaining, 0), math.MaxUint32))
			st.DurationUntilReset = durationpb.New(d.ResetAfter)
			if tightest < 0 || tighter(d, decisions[tightest]) {
				tightest = i
			}
		}
		resp.Statuses[i] = st
	}
	if s.opts.Headers && tightest >= 0 {
		resp.ResponseHeadersToAdd = headers(decisions[tightest])
	}
	return resp, nil
}

// tighter reports whether d is closer to its limit than e: a refusal
// before an admission, then the smaller fraction remaining.
func tighter(d, e agent.Decision) bool {
	if d.Allowed != e.Allowed {
		return !d.Allowed
	}
	return float64(d.Remaining)/float64(d.Limit) < float64(e.Remaining)/float64(e.Limit)
}

// descriptors converts and bounds a request's descriptors.
func descriptors(req *rlsv3.RateLimitRequest) ([]agent.Descriptor, error) {
	if req.GetDomain() == "" {
		return nil, fmt.Errorf("domain: must not be empty")
	}
	if len(req.GetDomain()) > MaxDomainLen {
		return nil, fmt.Errorf("domain: must be at most %d bytes", MaxDomainLen)
	}
	ds := req.GetDescriptors()
	switch {
	case len(ds) == 0:
		return nil, fmt.Errorf("descriptors: must not be empty")
	case len(ds) > MaxDescriptors:
		return nil, fmt.Errorf("descriptors: %d; at most %d", len(ds), MaxDescriptors)
	}
	n := 0
	for _, d := range ds {
		n += len(d.GetEntries())
	}
	entries := make([]agent.Entry, 0, n)
	out := make([]agent.Descriptor, len(ds))
	for i, d := range ds {
		es := d.GetEntries()
		if len(es) > MaxEntries {
			return nil, fmt.Errorf("descriptors[%d]: %d entries; at most %d", i, len(es), MaxEntries)
		}
		start := len(entries)
		for _, e := range es {
			// Values come from request headers: any length is decided
			// (a long one is hashed into the key), so that no client can
			// make a request invalid, and Envoy fail it open, by sending
			// a long header.
			entries = append(entries, agent.Entry{Key: e.GetKey(), Value: e.GetValue()})
		}
		out[i].Entries = entries[start:len(entries):len(entries)]
		if h := d.GetHitsAddend(); h != nil {
			if h.GetValue() > agent.MaxCost {
				return nil, fmt.Errorf("descriptors[%d].hits_addend: %d; at most %d", i, h.GetValue(), int64(agent.MaxCost))
			}
			out[i].Cost, out[i].Peek = int64(h.GetValue()), h.GetValue() == 0
		}
		if l := d.GetLimit(); l != nil {
			out[i].Limit = limitOf(l)
		}
		if d.GetIsNegativeHits() {
			// Refilling a budget is not a decision: such a descriptor
			// matches no rule and is admitted uncounted.
			out[i].Entries = nil
		}
	}
	return out, nil
}

// limitOf converts a descriptor's limit: requests_per_unit per unit, as
// envoyproxy/ratelimit applies it (src/config/config_impl.go, GetLimit),
// with its units (a month 30 days, a year 365, and 7, its WEEK, a week).
// Unlike it, the unit_multiplier Envoy's API defines is honoured (it
// ignores it), and a unit of UNKNOWN, or one it does not know, makes no
// limit, so the rule's applies (it panics; envoyproxy/ratelimit#1202
// falls back to the configuration so). A limit of 0 requests refuses
// every request, as there.
func limitOf(l *commonv3.RateLimitDescriptor_RateLimitOverride) *agent.Limit {
	var per time.Duration
	switch l.GetUnit() {
	case typev3.RateLimitUnit_SECOND:
		per = time.Second
	case typev3.RateLimitUnit_MINUTE:
		per = time.Minute
	case typev3.RateLimitUnit_HOUR:
		per = time.Hour
	case typev3.RateLimitUnit_DAY:
		per = 24 * time.Hour
	case typev3.RateLimitUnit_MONTH:
		per = 30 * 24 * time.Hour
	case typev3.RateLimitUnit_YEAR:
		per = 365 * 24 * time.Hour
	case typev3.RateLimitUnit(rlsv3.RateLimitResponse_RateLimit_WEEK):
		per = 7 * 24 * time.Hour
	default:
		return nil
	}
	if m := time.Duration(l.GetUnitMultiplier().GetValue()); m > 1 {
		if m > math.MaxInt64/per {
			per = math.MaxInt64 // beyond any period: the agent counts it and applies the rule's
		} else {
			per *= m
		}
	}
	return &agent.Limit{Requests: int64(l.GetRequestsPerUnit()), Per: per}
}

// units are the periods Envoy can name, longest first.
var units = []struct {
	d    time.Duration
	unit rlsv3.RateLimitResponse_RateLimit_Unit
}{
	{7 * 24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_WEEK},
	{24 * time.Hour, rlsv3.RateLimitResponse_RateLimit_DAY},
	{time.Hour, rlsv3.RateLimitResponse_RateLimit_HOUR},
	{time.Minute, rlsv3.RateLimitResponse_RateLimit_MINUTE},
	{time.Second, rlsv3.RateLimitResponse_RateLimit_SECOND},
}

// currentLimit expresses a decision's limit as Envoy's: requests per a
// whole number of units, or, for a period that is no whole number of
// seconds, the rate per second rounded.
func currentLimit(d agent.Decision) *rlsv3.RateLimitResponse_RateLimit {
	rl := &rlsv3.RateLimitResponse_RateLimit{Name: d.Rule}
	for _, u := range units {
		if d.Period >= u.d && d.Period%u.d == 0 {
			rl.RequestsPerUnit = uint32(min(d.Limit, math.MaxUint32))
			rl.Unit = u.unit
			if m := d.Period / u.d; m > 1 {
				rl.UnitMultiplier = wrapperspb.UInt32(uint32(min(m, math.MaxUint32)))
			}
			return rl
		}
	}
	rl.RequestsPerUnit = uint32(min(math.Round(float64(d.Limit)*float64(time.Second)/float64(d.Period)), math.MaxUint32))
	rl.Unit = rlsv3.RateLimitResponse_RateLimit_SECOND
	return rl
}

// headers are the RateLimit headers of the tightest descriptor, as
// envoyproxy/ratelimit writes them, with Retry-After on a refusal.
func headers(d agent.Decision) []*corev3.HeaderValue {
	reset := int64(math.Ceil(d.ResetAfter.Seconds()))
	hs := []*corev3.HeaderValue{
		{Key: "RateLimit-Limit", Value: strconv.FormatInt(d.Limit, 10)},
		{Key: "RateLimit-Remaining", Value: strconv.FormatInt(max(d.Remaining, 0), 10)},
		{Key: "RateLimit-Reset", Value: strconv.FormatInt(reset, 10)},
	}
	if !d.Allowed && d.RetryAfter > 0 {
		hs = append(hs, &corev3.HeaderValue{Key: "Retry-After", Value: strconv.FormatInt(int64(math.Ceil(d.RetryAfter.Seconds())), 10)})
	}
	return hs
}
