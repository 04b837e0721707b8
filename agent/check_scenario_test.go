package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/scenario"
	"github.com/allot-io/allot/lease"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// TestCheckScenarios runs the scripts in testdata/check/ against an Agent
// on a manual clock (see internal/scenario; run with -rewrite to rewrite
// their expected output, then review the diff). Time starts at 10:00:00
// UTC, t=0, and moves only when a script says.
//
//	rules [coordinated] [nodes=N]   a new agent, gw-1 in eu-west, with these
//	- {name: ..., ...}              rules (a rules file's list items);
//	                                coordinated: it reports, by hand, to a
//	                                coordinator of N nodes (default 1)
//	check [tenant=T] [plan=P] [user=U] [route=R] [ip=I] [priority=P] [cost=C] [n=N] [every=D]
//	                                the decision; n: N checks, every D apart
//	advance DURATION                time passes
//	report [fail] [nodes=N]         one report, and the coordinator's answer:
//	lease RULE [key=K] [tenant=T] [priority=P] limit=L [burst=B] [next=X]
//	                                the leases it carries, for keys the report
//	                                holds (a global rule's class: tenant and
//	                                priority); fail: no coordinator answers
//	status                          how the agent stands
func TestCheckScenarios(t *testing.T) {
	scenario.Run(t, "testdata/check/*.txt", func(t *testing.T) scenario.Commands {
		s := &checkScenario{t: t, clk: newManualClock()}
		t.Cleanup(s.close)
		return s.commands()
	})
}

// scenarioClock is the tests' manual clock.
type scenarioClock interface {
	Now() time.Time
	Advance(time.Duration)
}

type checkScenario struct {
	t     *testing.T
	clk   scenarioClock
	start time.Time
	a     *Agent
	coord *handCoordinator
	rules map[string]rules.Rule
}

// handCoordinator answers the agent's reports as the script says: it
// acknowledges every usage batch, and carries the leases it is given.
// Close's last reports reach it too.
type handCoordinator struct {
	clk   scenarioClock
	nodes uint32
	seq   uint64 // leases granted
}

// errNoCoordinator is what a report gets when no coordinator answers.
var errNoCoordinator = errors.New("scenario: no coordinator answers")

func (h *handCoordinator) Report(_ context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error) {
	return h.answer(req, nil), nil
}

func (h *handCoordinator) answer(req *allotpb.ReportRequest, leases []*allotpb.Lease) *allotpb.ReportResponse {
	now := h.clk.Now()
	resp := &allotpb.ReportResponse{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Epoch: 1, CoordinatorUnixNano: now.UnixNano(), Leases: leases,
		Nodes: h.nodes, RulesVersion: req.GetRulesVersion(), ReportIntervalNano: int64(time.Second), LeaseTtlNano: int64(5 * time.Second),
		RenewUnixNano: now.Add(5 * time.Second).UnixNano(), BillingWindowNano: int64(time.Hour),
	}
	if b := req.GetUsage(); b != nil {
		resp.AckedSeq = b.GetSeq()
	}
	return resp
}

func (s *checkScenario) close() {
	if s.a != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.a.Close(ctx); err != nil {
			s.t.Errorf("closing the agent: %v", err)
		}
		s.a = nil
	}
}

func (s *checkScenario) commands() scenario.Commands {
	return scenario.Commands{
		"rules":   {Keys: []string{"nodes"}, Flags: []string{"coordinated"}, Input: true, Run: s.setRules},
		"check":   {Keys: []string{"tenant", "plan", "user", "route", "ip", "priority", "cost", "n", "every"}, Run: s.check},
		"advance": {Positional: []string{"duration"}, Run: s.advance},
		"report":  {Keys: []string{"nodes"}, Flags: []string{"fail"}, Input: true, Run: s.report},
		"status":  {Run: s.status},
	}
}

func (s *checkScenario) elapsed() time.Duration { return s.clk.Now().Sub(s.start) }

func (s *checkScenario) setRules(c *scenario.Call) (string, error) {
	rs, err := rules.Parse(c.Pos(), []byte("rules:\n"+c.Input()+"\n"))
	if err != nil {
		return "", scriptLines(c, err)
	}
	if len(rs) == 0 {
		return "", errors.New("no rules: an agent needs one")
	}
	s.close()
	if s.start.IsZero() {
		s.start = s.clk.Now()
	}
	cfg := Config{NodeID: "gw-1", Region: "eu-west", Rules: rs, Clock: s.clk, ReportInterval: time.Second}
	s.coord = nil
	if c.Flag("coordinated") {
		nodes := c.Int("nodes", 1)
		if nodes < 1 || nodes > 1<<16 {
			return "", fmt.Errorf("nodes=%d: want 1 to 65536", nodes)
		}
		s.coord = &handCoordinator{clk: s.clk, nodes: uint32(nodes)}
		cfg.Transport = byHand{s.coord}
	} else if c.Has("nodes") {
		return "", errors.New("nodes=: only a coordinated agent has a fleet")
	}
	if s.a, err = New(cfg); err != nil {
		return "", err
	}
	s.rules = map[string]rules.Rule{}
	var order []string
	for _, r := range s.a.Rules().Rules() {
		s.rules[r.Name] = r
		order = append(order, r.Name)
	}
	return "rules " + strings.Join(order, ", ") + " (in evaluation order)\n", nil
}

// scriptLines points a rule file's errors at the script's lines: the
// input is the file's list, one line below its rules: line.
func scriptLines(c *scenario.Call, err error) error {
	fix := func(e *rules.Error) {
		if e.Line > 1 {
			e.File, e.Line = c.InputPos(e.Line-1), 0
		}
	}
	var one *rules.Error
	var many rules.Errors
	switch {
	case errors.As(err, &many):
		for _, e := range many {
			fix(e)
		}
	case errors.As(err, &one):
		fix(one)
	}
	return err
}

var errNoAgent = errors.New("no agent yet: give the rules first")

func (s *checkScenario) check(c *scenario.Call) (string, error) {
	if s.a == nil {
		return "", errNoAgent
	}
	prio, err := ParsePriority(c.String("priority", ""))
	if err != nil {
		return "", err
	}
	req := Request{Tenant: c.String("tenant", ""), Plan: c.String("plan", ""), User: c.String("user", ""), Route: c.String("route", ""),
		IP: c.String("ip", ""), Priority: prio, Cost: c.Int("cost", 0)}
	n, every := c.Int("n", 1), c.Duration("every", 0)
	if n < 1 || every < 0 {
		return "", fmt.Errorf("n=%d every=%v: want at least one check, and time that moves forward", n, every)
	}
	if !c.Has("n") {
		return decision(s.a.Check(req)), nil
	}
	var allowed, refused int
	var last Decision
	for i := range n {
		if i > 0 && every > 0 {
			s.clk.Advance(every)
		}
		last = s.a.Check(req)
		if last.Allowed {
			allowed++
		} else {
			refused++
		}
	}
	return fmt.Sprintf("allowed=%d refused=%d t=%v\nlast: %s", allowed, refused, s.elapsed(), decision(last)), nil
}

// decision prints a Decision's fields that a gateway answers with.
func decision(d Decision) string {
	var b strings.Builder
	if d.Allowed {
		b.WriteString("allowed")
	} else {
		b.WriteString("refused")
	}
	if d.Rule != "" {
		fmt.Fprintf(&b, " rule=%s limit=%d/%v remaining=%d", d.Rule, d.Limit, d.Period, d.Remaining)
	}
	if !d.Allowed {
		fmt.Fprintf(&b, " retry-after=%v", d.RetryAfter)
	}
	if d.Fallback {
		b.WriteString(" fallback")
	}
	if d.NoRules {
		b.WriteString(" no-rules")
	}
	return b.String() + "\n"
}

func (s *checkScenario) advance(c *scenario.Call) (string, error) {
	d := c.ParseDuration("duration", c.Arg(0))
	if d <= 0 {
		return "", fmt.Errorf("%v: time only moves forward", d)
	}
	s.clk.Advance(d)
	return fmt.Sprintf("t=%v\n", s.elapsed()), nil
}

// report carries one report to the coordinator and back: it prints what
// the report says of each key, then applies the answer.
func (s *checkScenario) report(c *scenario.Call) (string, error) {
	if s.coord == nil {
		return "", errors.New("the agent is standalone: give its rules with coordinated")
	}
	x := s.a.prepareReport(false)
	var b strings.Builder
	demand := slices.Clone(x.req.GetDemand())
	slices.SortFunc(demand, func(p, q *allotpb.KeyDemand) int {
		return strings.Compare(demandName(s.rules, p), demandName(s.rules, q))
	})
	for _, d := range demand {
		fmt.Fprintf(&b, "demand %s admitted=%g denied=%g held=%.2f\n", demandName(s.rules, d), d.GetAdmitted(), d.GetDenied(), d.GetHeld())
	}
	if x.req.GetUsage() != nil {
		fmt.Fprintf(&b, "usage batch %d\n", x.req.GetUsage().GetSeq())
	}
	if c.Flag("fail") {
		if c.Input() != "" {
			return "", errors.New("fail: a report no coordinator answers carries no leases back")
		}
		s.a.deliver(x, nil, errNoCoordinator)
		return b.String() + "no answer\n", nil
	}
	if c.Has("nodes") {
		nodes := c.Int("nodes", 1)
		if nodes < 1 || nodes > 1<<16 {
			return "", fmt.Errorf("nodes=%d: want 1 to 65536", nodes)
		}
		s.coord.nodes = uint32(nodes)
	}
	var leases []*allotpb.Lease
	if _, err := c.Lines(scenario.Commands{"lease": {Positional: []string{"rule"}, Keys: []string{"tenant", "priority", "limit", "burst", "next"}, Lists: []string{"key"}, Required: []string{"limit"},
		Run: func(c *scenario.Call) (string, error) {
			l, err := s.leaseLine(c, x.req)
			leases = append(leases, l)
			return "", err
		}}}); err != nil {
		return "", err
	}
	s.a.deliver(x, s.coord.answer(x.req, leases), nil)
	if b.Len() == 0 {
		return "no demand\n", nil
	}
	return b.String(), nil
}

// demandName names a report's demand as a lease line names it.
func demandName(rs map[string]rules.Rule, d *allotpb.KeyDemand) string {
	if r, ok := rs[d.GetRule()]; ok && r.Fair() {
		return fmt.Sprintf("%s tenant=%s priority=%d", d.GetRule(), d.GetTenant(), d.GetPriority())
	}
	if r, ok := rs[d.GetRule()]; ok && len(r.KeyAttrs()) > 1 {
		return fmt.Sprintf("%s key=%s", d.GetRule(), keyValues(d.GetKey()))
	}
	return fmt.Sprintf("%s key=%s", d.GetRule(), d.GetKey())
}

// keyValues prints a key of several values (rules.AppendKey) as the list
// of them: each is length-prefixed in the key, or hashed (#hex).
func keyValues(key string) string {
	var vals []string
	for i := 0; i < len(key); {
		switch n := int(key[i]); {
		case n == 0x7f && i+33 <= len(key):
			vals = append(vals, "#"+key[i+1:i+33])
			i += 33
		case n < 0x7f && i+1+n <= len(key):
			vals = append(vals, key[i+1:i+1+n])
			i += 1 + n
		default:
			return fmt.Sprintf("%q", key) // not a key of several values
		}
	}
	return "(" + strings.Join(vals, ", ") + ")"
}

// leaseLine reads a lease the answer carries, for a demand of req.
func (s *checkScenario) leaseLine(c *scenario.Call, req *allotpb.ReportRequest) (*allotpb.Lease, error) {
	r, ok := s.rules[c.Arg(0)]
	if !ok {
		return nil, fmt.Errorf("no rule %s in the rules", c.Arg(0))
	}
	l := &allotpb.Lease{Rule: r.Name, Tenant: c.String("tenant", ""), Limit: c.Float("limit", 0)}
	if vals := c.List("key"); vals != nil {
		if attrs := r.KeyAttrs(); len(vals) != len(attrs) {
			return nil, fmt.Errorf("key=: rule %s's key is %v: give key=(%s)", r.Name, attrs, strings.Repeat("..., ", len(attrs)-1)+"...")
		}
		l.Key = string(rules.AppendKey(nil, vals...))
	}
	if r.Fair() {
		if c.Has("key") {
			return nil, errors.New("key=: a global rule is leased by class: tenant and priority")
		}
		p := c.Int("priority", 0)
		if p < 0 || p > 255 {
			return nil, fmt.Errorf("priority=%d: want 0 to 255", p)
		}
		l.Priority = uint32(p)
	} else if c.Has("priority") || c.Has("tenant") {
		return nil, fmt.Errorf("rule %s is leased by key, not by tenant and priority", r.Name)
	}
	var found *allotpb.KeyDemand
	for _, d := range req.GetDemand() {
		if d.GetRule() == l.Rule && d.GetKey() == l.Key && (!r.Fair() || d.GetTenant() == l.Tenant && d.GetPriority() == l.Priority) {
			found = d
		}
	}
	if found == nil {
		var held []string
		for _, d := range req.GetDemand() {
			held = append(held, demandName(s.rules, d))
		}
		slices.Sort(held)
		return nil, fmt.Errorf("the report holds no demand for %s (a key is leased once it is hot, and reported); it holds [%s]",
			demandName(s.rules, &allotpb.KeyDemand{Rule: l.Rule, Key: l.Key, Tenant: l.Tenant, Priority: l.Priority}), strings.Join(held, "; "))
	}
	if l.Limit < 0 {
		return nil, fmt.Errorf("limit=%g: a lease is at least 0", l.Limit)
	}
	if !r.Fair() {
		l.Tenant = found.GetTenant()
	}
	now := s.clk.Now()
	s.coord.seq++
	l.Epoch, l.Seq, l.ExpiresUnixNano = 1, s.coord.seq, now.Add(5*time.Second).UnixNano()
	// The coordinators' burst: the rule's, in proportion to the lease.
	limit := float64(r.LimitFor(found.GetTenant(), found.GetPlan()))
	l.Burst = c.Float("burst", lease.BurstShare(limit, r.BurstFor(limit), l.Limit))
	if r.Algorithm.Windowed() {
		l.WindowUnixNano = now.Truncate(r.Period).UnixNano()
		l.NextLimit = c.Float("next", l.Limit)
	} else if c.Has("next") {
		return nil, fmt.Errorf("next=: rule %s is not a window rule", r.Name)
	}
	return l, nil
}

// status prints how the agent stands.
func (s *checkScenario) status(*scenario.Call) (string, error) {
	if s.a == nil {
		return "", errNoAgent
	}
	st := s.a.Status()
	var b strings.Builder
	fmt.Fprintf(&b, "ready=%t rules_source=%s rules_ready=%t nodes=%d\n", st.Ready, st.RulesSource, st.RulesReady, st.Nodes)
	fmt.Fprintf(&b, "rules: %s\n", strings.Join(st.Rules, ", "))
	if len(st.Fallback) > 0 {
		fmt.Fprintf(&b, "fallback: %s\n", strings.Join(st.Fallback, ", "))
	}
	for _, p := range st.Problems {
		fmt.Fprintf(&b, "problem: %s %s: %s\n", p.Rule, p.Problem, p.Reason)
	}
	if st.ReportError != "" {
		fmt.Fprintf(&b, "report error: %s\n", st.ReportError)
	}
	if st.PendingBatches > 0 {
		fmt.Fprintf(&b, "pending batches: %d\n", st.PendingBatches)
	}
	if !st.LastReport.IsZero() {
		fmt.Fprintf(&b, "last report: t=%v\n", st.LastReport.Sub(s.start))
	}
	return b.String(), nil
}

// TestCheckScenarioMistakes: a script's mistakes fail at their line.
func TestCheckScenarioMistakes(t *testing.T) {
	const api = "rules coordinated nodes=4\n- {name: api, scope: user, algorithm: token_bucket, limit: 100, period: 1s, intent: capacity}\n----\nrules api (in evaluation order)\n\n"
	for _, tc := range []struct{ name, src, want string }{
		{"bad rule", "rules\n- {name: api, scope: tenant, algorithm: token_bucket, limit: 100, period: 1s, intent: capacity}\n- {name: api2, scope: tenant, algorithm: token_bucket, limit: 100, period: 1s, intent: capcity}\n----\n",
			"<string>:1: rules: rules: <string>:3: rule api2: intent: "},
		{"no rules yet", "check tenant=acme\n----\n", "<string>:1: check: no agent yet: give the rules first"},
		{"standalone report", "rules\n- {name: api, scope: tenant, algorithm: token_bucket, limit: 100, period: 1s, intent: capacity}\n----\nrules api (in evaluation order)\n\nreport\n----\n",
			"<string>:6: report: the agent is standalone: give its rules with coordinated"},
		{"bad priority", api + "check tenant=acme priority=urgent\n----\n", `<string>:6: check: agent: unknown priority "urgent"`},
		{"misspelt key", api + "check tenant=acme usr=u1\n----\n", "<string>:6: check: unknown argument usr=u1"},
		{"lease of a cold key", api + "report\nlease api key=(acme, u1) limit=80\n----\n",
			"<string>:7: lease: the report holds no demand for api key=(acme, u1) (a key is leased once it is hot, and reported); it holds []"},
		{"key of the wrong shape", api + "report\nlease api key=acme limit=80\n----\n", "<string>:7: lease: key=: rule api's key is [tenant user]: give key=(..., ...)"},
		{"leases on a failed report", api + "report fail\nlease api key=(acme, u1) limit=80\n----\n", "<string>:6: report: fail: a report no coordinator answers carries no leases back"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &checkScenario{t: t, clk: newManualClock()}
			t.Cleanup(s.close)
			if got := scenario.Failure(t, tc.src, s.commands()); !strings.Contains(got, tc.want) {
				t.Fatalf("failure:\n%s\nwant it to contain:\n%s", got, tc.want)
			}
		})
	}
}
