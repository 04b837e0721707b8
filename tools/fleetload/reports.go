package main

import (
	"context"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// reportCalls times every report call the agents make, from their side:
// a gRPC client interceptor on each agent's connections. The agents'
// own histogram (allot_agent_report_duration_seconds) has buckets a
// factor of two apart, too coarse for a p99 against a one-second
// interval; this keeps every call's time. A call is one attempt: an
// agent whose report a follower turns away tries the leader next, and
// both calls are counted.
type reportCalls struct {
	interval time.Duration
	start    time.Time
	mu       sync.Mutex
	lat      []float64 // seconds, since the last take
	byCode   map[codes.Code]int64
	seconds  []second // by second since start
}

// second is what the calls that ended in one second came to.
type second struct{ calls, inTime int32 }

func newReportCalls(interval time.Duration, start time.Time) *reportCalls {
	return &reportCalls{interval: interval, start: start, byCode: map[codes.Code]int64{}}
}

// interceptor times the report calls on a connection.
func (r *reportCalls) interceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if !strings.HasSuffix(method, "/Report") {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		t0 := time.Now()
		err := invoker(ctx, method, req, reply, cc, opts...)
		r.record(t0, time.Since(t0), status.Code(err))
		return err
	}
}

func (r *reportCalls) record(t0 time.Time, d time.Duration, code codes.Code) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lat = append(r.lat, d.Seconds())
	r.byCode[code]++
	s := int(t0.Add(d).Sub(r.start) / time.Second)
	if s < 0 {
		return
	}
	for len(r.seconds) <= s {
		r.seconds = append(r.seconds, second{})
	}
	r.seconds[s].calls++
	if code == codes.OK && d <= r.interval {
		r.seconds[s].inTime++
	}
}

// restart times the seconds from start, forgetting those before.
func (r *reportCalls) restart(start time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.start, r.seconds = start, nil
}

// take returns the calls' times since the last take, sorted, and their
// results by code.
func (r *reportCalls) take() ([]float64, map[codes.Code]int64) {
	r.mu.Lock()
	lat, byCode := r.lat, r.byCode
	r.lat, r.byCode = nil, map[codes.Code]int64{}
	r.mu.Unlock()
	slices.Sort(lat)
	return lat, byCode
}

// perSecond is a copy of the calls by second since start.
func (r *reportCalls) perSecond() []second {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seconds)
}

// quantile is the q-quantile of sorted values (nearest rank), NaN of none.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return nan
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
