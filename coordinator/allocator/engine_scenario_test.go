package allocator_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/internal/scenario"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/allot-io/allot/rules"
)

// TestEngineScenarios runs the scripts in testdata/engine/ against a
// allocator.Engine, with nodes held by hand (see internal/scenario; run
// with -rewrite to rewrite their expected output, then review the diff).
// Time starts at 10:00:00 UTC, t=0, and moves only when a script says.
//
//	rules                    the rules, one YAML list item (a rule of a rules
//	- {name: ..., ...}       file) after another; the first makes the engine,
//	                         leading since now (epoch 1), in region eu-west
//	report node=N [leaving] [lose] [restart]
//	demand RULE [key=K] [tenant=T] [plan=P] [priority=N|exempt] admitted=A [denied=D] [committed=C]
//	usage RULE [tenant=T] admitted=A [denied=D]
//	                         one report of N: a second of the demand lines
//	                         (which stay its demand until another report
//	                         gives others), the leases it holds, and its usage
//	                         batch; prints the answer. leaving: its last
//	                         report; lose: the answer never arrives; restart:
//	                         a new process (incarnation) under the name
//	run DURATION             the cluster for DURATION: every round interval
//	                         a round, every report interval first a report
//	                         from every running node
//	advance DURATION         time passes, nothing else
//	round                    one round
//	stop node=N              N stops reporting, without leaving (a crash)
//	failover                 a new leader
//	leases                   what every node holds, and each key's total
//	usage                    the ledger's totals for what was reported
//
// A demand's key is its tenant for a keyed rule, and "" for a global one
// (whose classes are tenant and priority); its tenant is its key. Under a
// window rule a node admits no more than its count for the window allows
// (its lease's, or else its unleased share, the limit ÷ the fleet the last
// answer counted), and reports the rest of the line's admitted as denied;
// its committed count is what it admitted in the window so far, unless
// the line gives it.
func TestEngineScenarios(t *testing.T) {
	scenario.Run(t, "testdata/engine/*.txt", func(t *testing.T) scenario.Commands {
		return newEngineScenario().commands()
	})
}

// scenarioStart is t=0: aligned to the hour, so windows start with it.
var scenarioStart = time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)

const scenarioRegion = "eu-west"

type engineScenario struct {
	now   time.Time
	eng   *allocator.Engine
	rules map[string]rules.Rule
	nodes map[string]*scenarioNode
	// billed are the (tenant, rule) pairs usage was reported for.
	billed map[[2]string]bool
}

func newEngineScenario() *engineScenario {
	return &engineScenario{now: scenarioStart, rules: map[string]rules.Rule{}, nodes: map[string]*scenarioNode{}, billed: map[[2]string]bool{}}
}

func (s *engineScenario) commands() scenario.Commands {
	return scenario.Commands{
		"rules":   {Input: true, Run: s.setRules},
		"report":  {Keys: []string{"node"}, Required: []string{"node"}, Flags: []string{"leaving", "lose", "restart"}, Input: true, Run: s.report},
		"run":     {Positional: []string{"duration"}, Run: s.run},
		"advance": {Positional: []string{"duration"}, Run: s.advance},
		"round": {Run: func(*scenario.Call) (string, error) {
			if err := s.needEngine(); err != nil {
				return "", err
			}
			s.eng.Round(s.now)
			return s.clock(), nil
		}},
		"stop": {Keys: []string{"node"}, Required: []string{"node"}, Run: s.stop},
		"failover": {Run: func(*scenario.Call) (string, error) {
			if err := s.needEngine(); err != nil {
				return "", err
			}
			s.eng.Failover(s.now)
			return s.clock(), nil
		}},
		"leases": {Run: func(*scenario.Call) (string, error) { return s.leases(), nil }},
		"usage":  {Run: s.usage},
	}
}

var errNoEngine = errors.New("no engine yet: give the rules first")

func (s *engineScenario) needEngine() error {
	if s.eng == nil {
		return errNoEngine
	}
	return nil
}

// clock prints the time, and whether the leader is learning.
func (s *engineScenario) clock() string {
	out := fmt.Sprintf("t=%v", s.now.Sub(scenarioStart))
	if s.eng != nil && s.eng.Learning(s.now) {
		out += " learning"
	}
	return out + "\n"
}

// setRules reads the input as the list of a rules file and makes or
// updates the engine.
func (s *engineScenario) setRules(c *scenario.Call) (string, error) {
	rs, err := rules.Parse(c.Pos(), []byte("rules:\n"+c.Input()+"\n"))
	if err != nil {
		return "", inputLines(c, err)
	}
	if s.eng == nil {
		s.eng, err = allocator.NewEngine(allocator.EngineConfig{Region: scenarioRegion, ReportInterval: time.Second, Rules: rs}, s.now)
	} else {
		err = s.eng.SetRules(rs)
	}
	if err != nil {
		return "", err
	}
	clear(s.rules)
	var names []string
	for _, r := range rs {
		s.rules[r.Name] = r
		names = append(names, r.Name)
	}
	return "rules " + strings.Join(names, ", ") + "\n", nil
}

// inputLines points a rule file's errors at the script's lines: the input
// is the file's list, one line below its rules: line.
func inputLines(c *scenario.Call, err error) error {
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

func (s *engineScenario) node(name string) *scenarioNode {
	n := s.nodes[name]
	if n == nil {
		n = &scenarioNode{name: name, inc: 1, leases: map[leaseKey]*heldLease{}, committed: map[leaseKey]*windowCount{}}
		s.nodes[name] = n
	}
	return n
}

func (s *engineScenario) report(c *scenario.Call) (string, error) {
	if err := s.needEngine(); err != nil {
		return "", err
	}
	n := s.node(c.String("node", ""))
	if c.Flag("restart") {
		n.restart()
	}
	var demand []standingDemand
	var counts []*allotpb.UsageCount
	if _, err := c.Lines(scenario.Commands{
		"demand": {Positional: []string{"rule"}, Keys: []string{"key", "tenant", "plan", "priority", "admitted", "denied", "committed"}, Required: []string{"admitted"},
			Run: func(c *scenario.Call) (string, error) {
				d, err := s.demandLine(c)
				demand = append(demand, d)
				return "", err
			}},
		"usage": {Positional: []string{"rule"}, Keys: []string{"tenant", "admitted", "denied"}, Required: []string{"admitted"},
			Run: func(c *scenario.Call) (string, error) {
				u, err := s.usageLine(c)
				counts = append(counts, u)
				return "", err
			}},
	}); err != nil {
		return "", err
	}
	if demand != nil {
		n.demand = demand
	}
	if counts != nil {
		n.queue(counts, s.now)
	}
	leaving := c.Flag("leaving")
	resp, err := s.exchange(n, leaving, c.Flag("lose"))
	if err != nil {
		return fmt.Sprintf("refused: %v\n", err), nil
	}
	if leaving {
		n.running = false
	}
	if resp == nil {
		return "lost\n", nil
	}
	return s.answer(resp), nil
}

// demandLine reads one demand line of a report.
func (s *engineScenario) demandLine(c *scenario.Call) (standingDemand, error) {
	r, ok := s.rules[c.Arg(0)]
	if !ok {
		return standingDemand{}, fmt.Errorf("no rule %s in the rules", c.Arg(0))
	}
	d := &allotpb.KeyDemand{Rule: r.Name, Plan: c.String("plan", ""), Admitted: c.Float("admitted", 0), Denied: c.Float("denied", 0)}
	if r.Fair() {
		if c.Has("key") {
			return standingDemand{}, errors.New("key=: a global rule's demand has no key, only a tenant and a priority")
		}
		d.Tenant = c.String("tenant", "")
	} else {
		d.Key = c.String("key", "")
		d.Tenant = c.String("tenant", d.Key)
	}
	switch p := c.String("priority", "0"); p {
	case "exempt":
		d.Priority = 255
	default:
		v := c.Int("priority", 0)
		if v < 0 || v > 255 {
			return standingDemand{}, fmt.Errorf("priority=%d: want 0 to 255, or exempt", v)
		}
		d.Priority = uint32(v)
	}
	sd := standingDemand{d: d}
	if c.Has("committed") {
		if !r.Algorithm.Windowed() {
			return standingDemand{}, fmt.Errorf("committed=: rule %s is not a window rule", r.Name)
		}
		d.Committed, sd.committed = c.Float("committed", 0), true
	}
	return sd, nil
}

// usageLine reads one usage line of a report.
func (s *engineScenario) usageLine(c *scenario.Call) (*allotpb.UsageCount, error) {
	if _, ok := s.rules[c.Arg(0)]; !ok {
		return nil, fmt.Errorf("no rule %s in the rules", c.Arg(0))
	}
	admitted, denied := c.Int("admitted", 0), c.Int("denied", 0)
	if admitted < 0 || denied < 0 {
		return nil, errors.New("usage is counted up from 0")
	}
	u := &allotpb.UsageCount{Rule: c.Arg(0), Tenant: c.String("tenant", ""), Admitted: uint64(admitted), Denied: uint64(denied)}
	s.billed[[2]string{u.Tenant, u.Rule}] = true
	return u, nil
}

// exchange sends n's report and applies the answer, unless it is lost
// (nil answer).
func (s *engineScenario) exchange(n *scenarioNode, leaving, lose bool) (*allotpb.ReportResponse, error) {
	n.running = true
	req := n.request(s.rules, s.now, leaving)
	resp, err := s.eng.Report(s.now, req)
	if err != nil || lose {
		return nil, err
	}
	before := n.snapshot()
	n.apply(s.rules, req, resp)
	// As an agent does, a node whose lease was lowered says at once, in
	// an early report, that it holds the smaller one.
	if keys := n.lowered(s.rules, before); len(keys) > 0 && !leaving {
		creq := n.confirm(s.rules, s.now, keys)
		if cresp, err := s.eng.Report(s.now, creq); err == nil {
			n.apply(s.rules, creq, cresp)
		}
	}
	return resp, nil
}

// answer prints a report's answer: the leader's epoch, the fleet it sees,
// the usage batch acknowledged, and the leases it carried.
func (s *engineScenario) answer(resp *allotpb.ReportResponse) string {
	var b strings.Builder
	fmt.Fprintf(&b, "epoch=%d nodes=%d acked=%d\n", resp.GetEpoch(), resp.GetNodes(), resp.GetAckedSeq())
	type sent struct {
		k leaseKey
		l *allotpb.Lease
	}
	var ls []sent
	for _, l := range resp.GetLeases() {
		if r, ok := s.rules[l.GetRule()]; ok {
			ls = append(ls, sent{keyOf(r, l.GetKey(), l.GetTenant(), l.GetPriority()), l})
		}
	}
	slices.SortFunc(ls, func(x, y sent) int { return compareKeys(x.k, y.k) })
	for _, x := range ls {
		fmt.Fprintf(&b, "lease %s %s\n", x.k, s.limits(x.k.rule, x.l.GetLimit(), x.l.GetNextLimit(), x.l.GetWindowUnixNano()))
	}
	return b.String()
}

// limits prints a lease's limit, and for a window rule its window and the
// next windows' count.
func (s *engineScenario) limits(rule string, limit, next float64, window int64) string {
	out := amount(limit)
	if r, ok := s.rules[rule]; ok && r.Algorithm.Windowed() {
		out += fmt.Sprintf(" window=%v next=%s", time.Unix(0, window).Sub(scenarioStart), amount(next))
	}
	return out
}

// amount prints a lease's limit to the hundredth, and the smallest lease
// there is, which stands for "nothing more", as itself.
func amount(v float64) string {
	if v > 0 && v < 0.005 {
		return fmt.Sprintf("%.0e", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func (s *engineScenario) run(c *scenario.Call) (string, error) {
	if err := s.needEngine(); err != nil {
		return "", err
	}
	d := c.ParseDuration("duration", c.Arg(0))
	tick := s.eng.RoundInterval()
	if d <= 0 || d%tick != 0 {
		return "", fmt.Errorf("%v: want a positive multiple of the round interval, %v", d, tick)
	}
	for end := s.now.Add(d); s.now.Before(end); {
		s.now = s.now.Add(tick)
		if s.now.Sub(scenarioStart)%time.Second == 0 {
			for _, name := range sortedNames(s.nodes) {
				if n := s.nodes[name]; n.running {
					if _, err := s.exchange(n, false, false); err != nil {
						return "", fmt.Errorf("%s's report at t=%v: %w", name, s.now.Sub(scenarioStart), err)
					}
				}
			}
		}
		s.eng.Round(s.now)
	}
	return s.clock(), nil
}

func (s *engineScenario) advance(c *scenario.Call) (string, error) {
	d := c.ParseDuration("duration", c.Arg(0))
	if d <= 0 {
		return "", fmt.Errorf("%v: time only moves forward", d)
	}
	s.now = s.now.Add(d)
	return s.clock(), nil
}

func (s *engineScenario) stop(c *scenario.Call) (string, error) {
	n, ok := s.nodes[c.String("node", "")]
	if !ok {
		return "", fmt.Errorf("no node %s has reported", c.String("node", ""))
	}
	n.running = false
	return n.name + " stopped\n", nil
}

// leases prints every lease every node holds at now, and each key's total.
func (s *engineScenario) leases() string {
	var b strings.Builder
	totals := map[string]float64{}
	for _, name := range sortedNames(s.nodes) {
		n := s.nodes[name]
		for _, k := range n.held(s.now) {
			l := n.leases[k]
			fmt.Fprintf(&b, "%s %s %s\n", name, k, s.limits(k.rule, l.held, l.next, l.window))
			pool := k.rule // a global rule's classes share one allowance
			if !k.fair {
				pool += " " + k.key
			}
			totals[pool] += l.held
		}
	}
	for _, pool := range sortedNames(totals) {
		fmt.Fprintf(&b, "total %s %s\n", pool, amount(totals[pool]))
	}
	if b.Len() == 0 {
		return "no leases\n"
	}
	return b.String()
}

// usage prints the ledger's totals for every tenant and rule reported.
func (s *engineScenario) usage(*scenario.Call) (string, error) {
	if err := s.needEngine(); err != nil {
		return "", err
	}
	var keys [][2]string
	for k := range s.billed {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y [2]string) int { return strings.Compare(x[0]+"\x00"+x[1], y[0]+"\x00"+y[1]) })
	var b strings.Builder
	for _, k := range keys {
		admitted, denied := s.eng.Usage(k[0], k[1])
		fmt.Fprintf(&b, "tenant=%s rule=%s admitted=%d denied=%d\n", k[0], k[1], admitted, denied)
	}
	if b.Len() == 0 {
		return "no usage\n", nil
	}
	return b.String(), nil
}

func sortedNames[V any](m map[string]V) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// TestEngineScenarioMistakes: a script's mistakes fail at their line,
// rule files' included.
func TestEngineScenarioMistakes(t *testing.T) {
	const quota = "rules\n- {name: quota, scope: tenant, algorithm: token_bucket, limit: 900, period: 1s, intent: quota}\n----\nrules quota\n\n"
	for _, tc := range []struct{ name, src, want string }{
		{"bad rule", "rules\n- {name: quota, scope: tenant, algorithm: token_bucket, limit: 900, period: 1s, intent: quota}\n- {name: q2, scope: tenant, algorithm: token_bucket, limit: 0, period: 1s, intent: quota}\n----\n",
			"<string>:1: rules: rules: <string>:3: rule q2: limit: "},
		{"no rules yet", "report node=gw-1\n----\n", "<string>:1: report: no engine yet: give the rules first"},
		{"unknown rule", quota + "report node=gw-1\ndemand quotta key=acme admitted=1\n----\n", "<string>:7: demand: no rule quotta in the rules"},
		{"misspelt key", quota + "report node=gw-1\ndemand quota key=acme admited=1\n----\n", "<string>:7: demand: unknown argument admited=1"},
		{"committed on a rate rule", quota + "report node=gw-1\ndemand quota key=acme admitted=1 committed=3\n----\n", "<string>:7: demand: committed=: rule quota is not a window rule"},
		{"run off the rounds", quota + "run 300ms\n----\n", "<string>:6: run: 300ms: want a positive multiple of the round interval, 250ms"},
		{"stop a stranger", quota + "stop node=gw-9\n----\n", "<string>:6: stop: no node gw-9 has reported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := scenario.Failure(t, tc.src, newEngineScenario().commands()); !strings.Contains(got, tc.want) {
				t.Fatalf("failure:\n%s\nwant it to contain:\n%s", got, tc.want)
			}
		})
	}
}
