package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/allot-io/allot/internal/tracing"
	allotpb "github.com/allot-io/allot/proto"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What one report carries at most, well inside the coordinators' defaults
// (200,000 keys, 8 MiB). A coordinator configured tighter refuses a larger
// report as too big, and the agent halves these and splits again.
const (
	defaultMaxEntries = 10_000
	defaultMaxBytes   = 1 << 20
	// maxExtraReports bounds the usage-only reports one cycle sends to
	// catch up on a backlog (a long outage, a burst of new tenants).
	maxExtraReports = 32
	// maxMends bounds how often one report is mended and sent again.
	maxMends = 4
)

// limits are the reporter's current bounds on one report.
type limits struct {
	entries, bytes int
}

func (l limits) halved() limits {
	return limits{entries: max(l.entries/2, 1), bytes: max(l.bytes/2, 1024)}
}

// countSize estimates a usage count's encoded size.
func countSize(rule, tenant string) int { return len(rule) + len(tenant) + 40 }

// demandSize estimates a key demand's encoded size.
func demandSize(d *allotpb.KeyDemand) int {
	return len(d.GetRule()) + len(d.GetKey()) + len(d.GetTenant()) + len(d.GetPlan()) + 120
}

// seal makes what was accumulated the next usage batches, once every
// earlier one has been acknowledged, each within the report limits. What
// breaks the protocol's limits is quarantined here, before it is sent.
func (r *reporter) seal(now int64) {
	if len(r.pending) > 0 || len(r.acc) == 0 {
		return
	}
	var counts []*allotpb.UsageCount
	for k, c := range r.acc {
		counts = append(counts, &allotpb.UsageCount{Rule: k.rule, Tenant: k.tenant, WindowUnix: k.window, Admitted: c.admitted, Denied: c.denied})
	}
	r.acc = map[usageKey]*usageCounts{}
	probe := &allotpb.ReportRequest{Node: "-", Incarnation: 1, Usage: &allotpb.UsageBatch{Counts: counts}}
	if v := allotpb.ValidateReport(probe, allotpb.ReportLimits{}); len(v) > 0 {
		counts = r.quarantineCounts(counts, v, "refused by the agent's own check")
	}
	r.setPending(r.split(counts, now))
}

// setPending replaces the sealed batches, keeping Status's count in step.
func (r *reporter) setPending(p []*allotpb.UsageBatch) {
	r.pending = p
	r.pendingCount.Store(int64(len(p)))
}

// split cuts counts into batches within the limits, numbering them from
// the next sequence number.
func (r *reporter) split(counts []*allotpb.UsageCount, cut int64) []*allotpb.UsageBatch {
	var out []*allotpb.UsageBatch
	var cur *allotpb.UsageBatch
	size := 0
	for _, c := range counts {
		n := countSize(c.GetRule(), c.GetTenant())
		if cur == nil || len(cur.Counts) >= r.lim.entries || (size+n > r.lim.bytes && len(cur.Counts) > 0) {
			r.seq++
			cur = &allotpb.UsageBatch{Seq: r.seq, CutUnixNano: cut}
			out = append(out, cur)
			size = 0
		}
		cur.Counts = append(cur.Counts, c)
		size += n
	}
	return out
}

// resplit splits the first pending batch again after the limits shrank.
// It was never applied (the coordinator refused it as too big), so its
// sequence number and the later ones, never sent, are numbered afresh.
func (r *reporter) resplit() {
	if len(r.pending) == 0 {
		return
	}
	first, rest := r.pending[0], r.pending[1:]
	r.seq = first.GetSeq() - 1
	parts := r.split(first.GetCounts(), first.GetCutUnixNano())
	for _, b := range rest {
		r.seq++
		b.Seq = r.seq
	}
	r.setPending(append(parts, rest...))
}

// splitDemand divides a report's demand into parts within the limits:
// the first part keeps the request; each further part is a report of its
// own, without usage.
func (r *reporter) splitDemand(x *exchange) {
	for part := x; part != nil; part = part.next {
		d := part.req.GetDemand()
		size, cut := 0, len(d)
		for i, kd := range d {
			size += demandSize(kd)
			if i >= r.lim.entries || (size > r.lim.bytes && i > 0) {
				cut = i
				break
			}
		}
		if cut == len(d) {
			continue
		}
		rest := allotpb.ReportHeader(part.req)
		rest.Demand = d[cut:]
		part.req.Demand = d[:cut]
		part.next = &exchange{req: rest, held: part.held[cut:], sent: part.sent, urgent: part.urgent, next: part.next}
		part.held = part.held[:cut]
	}
}

// send carries one part of a report and applies the answer. A report
// the coordinators refuse as malformed or too large is mended and sent
// again: the entries refused are quarantined, never re-sent, and the rest
// goes through. It reports whether an answer was applied.
func (r *reporter) send(ctx context.Context, x *exchange) bool {
	tr := r.a.tracer
	if tr == nil {
		return r.sendTraced(ctx, x, nil)
	}
	ctx, span := r.startSpan(ctx, tr, x)
	defer span.End()
	return r.sendTraced(tracing.InjectGRPC(ctx), x, span)
}

// startSpan starts the client span of one report exchange: the
// coordinators that handle it see its context in the call's metadata,
// and their spans are its children.
func (r *reporter) startSpan(ctx context.Context, tr trace.Tracer, x *exchange) (context.Context, trace.Span) {
	req := x.req
	return tr.Start(ctx, "allot.agent.report", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
		tracing.Node.String(req.GetNode()), tracing.Region.String(req.GetRegion()),
		attribute.Int("allot.report.usage_counts", len(req.GetUsage().GetCounts())),
		attribute.Int64("allot.report.usage_seq", int64(req.GetUsage().GetSeq())),
		attribute.Int("allot.report.demand_keys", len(req.GetDemand())),
		attribute.Bool("allot.report.urgent", x.urgent)))
}

// sendTraced is send, recording on span (nil: tracing off) each attempt
// and its outcome.
func (r *reporter) sendTraced(ctx context.Context, x *exchange, span trace.Span) bool {
	for attempt := 0; ; attempt++ {
		if v := allotpb.ValidateReport(x.req, allotpb.ReportLimits{}); len(v) > 0 && !r.mend(x, v, "refused by the agent's own check") {
			err := fmt.Errorf("agent: report breaks the protocol's limits: %s: %s", v[0].Field, v[0].Description)
			if span != nil {
				tracing.Fail(span, err)
			}
			r.deliver(x, nil, err)
			return false
		}
		resp, err := r.transport.Report(ctx, x.req)
		if err != nil && attempt < maxMends && r.mendRefusal(x, err) {
			if span != nil {
				span.AddEvent("mended and sent again", trace.WithAttributes(attribute.String("error", err.Error())))
			}
			continue
		}
		if span != nil {
			span.SetAttributes(attribute.Int("allot.report.attempts", attempt+1), attribute.Int("allot.report.leases", len(resp.GetLeases())))
			tracing.Fail(span, err)
		}
		r.deliver(x, resp, err)
		return err == nil && !resp.GetShed() // a shed report's other parts wait too
	}
}

// mendRefusal mends a report the coordinators refused, when the refusal
// is about the report itself rather than the cluster's state. It reports
// whether the report may be sent again.
func (r *reporter) mendRefusal(x *exchange, err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	if st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max") {
		// gRPC refused the message for its size; other exhaustion
		// (overload, a proxy's limit) is not the report's fault.
		r.shrink(x, st.Message())
		return true
	}
	if st.Code() == codes.FailedPrecondition && hasReason(st, allotpb.ReasonStaleBatch) {
		// Recorded as applied: sent again, it is acknowledged, and the
		// batches after it are counted as usual.
		r.staleBatch(x, st.Message())
		return true
	}
	if st.Code() != codes.InvalidArgument {
		return false
	}
	var vs []allotpb.Violation
	for _, d := range st.Details() {
		br, ok := d.(*errdetails.BadRequest)
		if !ok {
			continue
		}
		for _, fv := range br.GetFieldViolations() {
			vs = append(vs, allotpb.ParseViolation(fv.GetField(), fv.GetDescription()))
		}
	}
	if len(vs) == 0 {
		// Refused without saying what: the batch is poisoned for this
		// coordinator, and sending it again would wedge every later one.
		if x.req.GetUsage() != nil && len(r.pending) > 0 && x.req.GetUsage() == r.pending[0] {
			r.quarantineCounts(r.pending[0].GetCounts(), allCounts(len(r.pending[0].GetCounts()), st.Message()), "refused by the coordinator")
			r.setPending(r.pending[1:])
			x.req.Usage = nil
			return true
		}
		return false
	}
	return r.mend(x, vs, "refused by the coordinator")
}

// hasReason reports whether a refusal carries an ErrorInfo of Allot's
// with reason.
func hasReason(st *status.Status, reason string) bool {
	for _, d := range st.Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok && ei.GetDomain() == allotpb.ErrorDomain && ei.GetReason() == reason {
			return true
		}
	}
	return false
}

// staleBatch records a usage batch the coordinators refused as stale: cut
// long ago by this incarnation, which they had forgotten, it may have
// been counted before its acknowledgement was lost, so none of it is
// counted now. Its units are counted as quarantined (field stale_batch):
// billed once before, or lost, never twice.
func (r *reporter) staleBatch(x *exchange, why string) {
	u := x.req.GetUsage()
	var admitted, denied uint64
	for _, c := range u.GetCounts() {
		admitted += c.GetAdmitted()
		denied += c.GetDenied()
	}
	m := r.a.metrics
	m.quarantined.WithLabelValues("usage", "stale_batch").Add(float64(len(u.GetCounts())))
	m.quarantinedUnits.WithLabelValues("admitted").Add(float64(admitted))
	m.quarantinedUnits.WithLabelValues("denied").Add(float64(denied))
	r.a.log.Error("usage batch refused as stale: the coordinators had forgotten this agent's incarnation (cut off for a day or more); it is not counted again, whether or not it was before",
		"seq", u.GetSeq(), "cut", time.Unix(0, u.GetCutUnixNano()).UTC().Format(time.RFC3339), "counts", len(u.GetCounts()),
		"admitted", admitted, "denied", denied, "reason", why)
}

func allCounts(n int, why string) []allotpb.Violation {
	out := make([]allotpb.Violation, n)
	for i := range out {
		out[i] = allotpb.Violation{Field: "usage.counts[" + strconv.Itoa(i) + "]", Description: why, Count: i, Demand: -1}
	}
	return out
}

// mend removes what the violations name from a report: refused usage
// counts are quarantined, refused demand keys stop being reported, and a
// report too big is split. It reports whether what is left may be sent;
// a violation of the report itself (the node's name, its incarnation)
// cannot be mended by the agent.
func (r *reporter) mend(x *exchange, vs []allotpb.Violation, why string) bool {
	var counts, demand []allotpb.Violation
	for _, v := range vs {
		switch {
		case v.Count >= 0:
			counts = append(counts, v)
		case v.Demand >= 0:
			demand = append(demand, v)
		case v.Field == "demand" || v.Field == "usage.counts":
			r.shrink(x, v.Field+": "+v.Description)
			return true
		default:
			r.a.log.Error("the coordinators refuse this agent's reports; check its configuration", "field", v.Field, "reason", v.Description, "why", why)
			return false
		}
	}
	if u := x.req.GetUsage(); len(counts) > 0 && u != nil {
		u.Counts = r.quarantineCounts(u.GetCounts(), counts, why)
	}
	if len(demand) > 0 {
		drop := map[int]bool{}
		for _, v := range demand {
			if v.Demand >= len(x.held) {
				continue
			}
			drop[v.Demand] = true
			hk := x.held[v.Demand]
			hk.refused = true
			r.a.metrics.quarantined.WithLabelValues("demand", fieldName(v.Field)).Inc()
			r.a.log.Error("key demand quarantined: the key keeps its unleased share and is no longer reported",
				"rule", x.req.Demand[v.Demand].GetRule(), "tenant", clip(hk.tenant), "field", v.Field, "reason", v.Description, "why", why)
		}
		keep, held := x.req.Demand[:0], x.held[:0]
		for i, d := range x.req.Demand {
			if !drop[i] {
				keep = append(keep, d)
				held = append(held, x.held[i])
			}
		}
		x.req.Demand, x.held = keep, held
	}
	return true
}

// shrink halves the report limits, or lowers them to the count a refusal
// names ("at most N"), and splits the report and the first pending batch
// to them.
func (r *reporter) shrink(x *exchange, why string) {
	r.lim = r.lim.halved()
	if _, after, ok := strings.Cut(why, "at most "); ok {
		var n int
		if _, err := fmt.Sscanf(after, "%d", &n); err == nil && n > 0 {
			r.lim.entries = min(r.lim.entries, n)
		}
	}
	r.a.log.Warn("the coordinators refuse reports this big; sending smaller ones", "entries", r.lim.entries, "bytes", r.lim.bytes, "reason", why)
	if u := x.req.GetUsage(); u != nil && len(r.pending) > 0 && u == r.pending[0] {
		r.resplit()
		x.req.Usage = r.pending[0]
	}
	r.splitDemand(x)
}

// quarantineCounts removes the counts the violations name, logging each
// and counting it, and returns the rest.
func (r *reporter) quarantineCounts(counts []*allotpb.UsageCount, vs []allotpb.Violation, why string) []*allotpb.UsageCount {
	drop := make(map[int]allotpb.Violation, len(vs))
	for _, v := range vs {
		if v.Count >= 0 && v.Count < len(counts) {
			drop[v.Count] = v
		}
	}
	keep := counts[:0:0]
	for i, c := range counts {
		v, bad := drop[i]
		if !bad {
			keep = append(keep, c)
			continue
		}
		m := r.a.metrics
		m.quarantined.WithLabelValues("usage", fieldName(v.Field)).Inc()
		m.quarantinedUnits.WithLabelValues("admitted").Add(float64(c.GetAdmitted()))
		m.quarantinedUnits.WithLabelValues("denied").Add(float64(c.GetDenied()))
		r.a.log.Error("usage quarantined: not billed, kept out of every later report",
			"rule", clip(c.GetRule()), "tenant", clip(c.GetTenant()), "window", c.GetWindowUnix(),
			"admitted", c.GetAdmitted(), "denied", c.GetDenied(), "field", v.Field, "reason", v.Description, "why", why)
	}
	return keep
}

// fieldName is a violation's last path element, for a metric label.
func fieldName(field string) string {
	if i := strings.LastIndexByte(field, '.'); i >= 0 {
		field = field[i+1:]
	}
	switch field {
	case "rule", "tenant", "plan", "key", "window_unix", "admitted", "denied", "held", "committed", "weight", "priority", "interval_nano":
		return field
	}
	return "other"
}

// clip shortens a value for a log line.
func clip(s string) string {
	if len(s) <= 80 {
		return s
	}
	return s[:80] + "…(" + strconv.Itoa(len(s)) + " bytes)"
}

// catchUp sends the usage batches left after a cycle's report, usage
// only, while the coordinators answer.
func (r *reporter) catchUp(ctx context.Context) {
	for i := 0; i < maxExtraReports && len(r.pending) > 0 && ctx.Err() == nil; i++ {
		before := r.pending[0]
		req, _ := r.request(nil, r.a.clock.now(), false, false)
		x := &exchange{req: req, sent: r.a.clock.local()}
		if !r.send(ctx, x) || (len(r.pending) > 0 && r.pending[0] == before) {
			return
		}
	}
}

// DefaultCloseTimeout bounds Close when its context has no deadline.
const DefaultCloseTimeout = 10 * time.Second

// shutdown stops the exchange and, within ctx, reports what is left:
// the usage not yet acknowledged, then a last report releasing every
// lease.
func (r *reporter) shutdown(ctx context.Context) error {
	close(r.quit)
	if !r.a.manual {
		<-r.exited
	}
	a := r.a
	a.settleDue(true) // open reservations are billed at their estimates
	r.cut(time.Unix(0, a.clock.now()))
	var lastErr error
	backoff := func(attempt int) {
		t := a.ts.NewTimer(min(100*time.Millisecond<<min(attempt, 4), time.Second))
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C():
		}
	}
	for attempt := 0; ctx.Err() == nil && (len(r.pending) > 0 || len(r.acc) > 0); attempt++ {
		r.seal(a.clock.now())
		before := len(r.pending)
		req, _ := r.request(nil, a.clock.now(), false, false)
		if !r.send(ctx, &exchange{req: req, sent: a.clock.local()}) {
			lastErr = r.lastErr
			backoff(attempt)
		} else if len(r.pending) == before {
			backoff(attempt) // answered, not acknowledged: a new leader catching up
		}
	}
	if len(r.pending) > 0 || len(r.acc) > 0 {
		return fmt.Errorf("usage not reported before the deadline (%v): %w", lastErr, ctx.Err())
	}
	// Release every lease, so the fleet gets this node's share at once,
	// and say that this incarnation's usage ends here: its last batch,
	// empty, lets the billing windows it reported in become final when
	// they end, not --agent-timeout later.
	now := a.clock.now()
	req, held := r.request(a.rules.Load(), now, false, true)
	r.seq++
	req.Usage = &allotpb.UsageBatch{Seq: r.seq, CutUnixNano: now, Last: true}
	x := &exchange{req: req, held: held, sent: a.clock.local()}
	r.splitDemand(x)
	for part := x; part != nil && ctx.Err() == nil; part = part.next {
		r.send(ctx, part)
	}
	return nil
}
