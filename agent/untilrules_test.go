package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/allot-io/allot/internal/testwait"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
)

// logBuffer collects an agent's log lines while it runs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Output: b, Level: hclog.Info})
}

// metricValue is the value of a gathered series, NaN-free: -1 when absent.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}
				if !found {
					continue series
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// securedCluster is one coordinator with credentials on: it accepts the
// tokens named here, and enforces the rules of rulesYAML ("" for none).
type securedCluster struct {
	addr   string
	tokens map[string]string // by name: gw-1 and gw-2 (agents for those nodes only), reader
}

func newSecuredCluster(t *testing.T, rulesYAML string) *securedCluster {
	t.Helper()
	dir := t.TempDir()
	sc := &securedCluster{tokens: map[string]string{}}
	body := "tokens:\n"
	for _, spec := range []struct{ name, entry string }{{"gw-1", "role: agent, nodes: gw-1"}, {"gw-2", "role: agent, nodes: gw-2"}, {"reader", "role: reader"}} {
		tok := auth.NewToken()
		sc.tokens[spec.name] = tok
		body += fmt.Sprintf("  - {name: %s, %s, token: %s}\n", spec.name, spec.entry, tok)
	}
	tokens := filepath.Join(dir, "tokens.yaml")
	if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var rulesFile string
	if rulesYAML != "" {
		rulesFile = filepath.Join(dir, "rules.yaml")
		if err := os.WriteFile(rulesFile, []byte(rulesYAML), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cs := coordinatorsWith(t, 1, func(c *coordinator.Config) { c.AuthTokensFile, c.RulesFile = tokens, rulesFile })
	sc.addr = cs[0].GRPCAddr()
	return sc
}

// tokenFile writes a token to a file an agent re-reads when it changes.
func tokenFile(t *testing.T, path, token string) {
	t.Helper()
	if err := os.WriteFile(path+".new", []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
}

const clusterRulesYAML = `rules:
  - {name: cluster-abuse, scope: tenant, algorithm: fixed_window, limit: 3, period: 1h, intent: abuse}
`

// TestUntilRules: an agent whose token names another node gets no rules:
// each policy decides as it says, never silently (an ERROR naming the
// cause and the fix, once however many reports are refused; Status; the
// metrics); once its token is right, the cluster's rules arrive and are
// enforced, whatever the policy was.
func TestUntilRules(t *testing.T) {
	sc := newSecuredCluster(t, clusterRulesYAML)
	startup := rule("startup-abuse", rules.Tenant, algo.FixedWindow, 2, time.Hour, lease.Abuse)
	tests := []struct {
		policy   UntilRules
		source   string
		ready    bool
		admitted int // of 5 checks
		label    string
	}{
		{UntilRulesClosed, "none", false, 0, "closed"},
		{UntilRulesOpen, "none", false, 5, "open"},
		{UntilRulesStatic, "until_rules", true, 2, "static"},
	}
	for _, tt := range tests {
		t.Run(tt.policy.String(), func(t *testing.T) {
			tf := filepath.Join(t.TempDir(), "token")
			tokenFile(t, tf, sc.tokens["gw-2"]) // names another node
			var logs logBuffer
			reg := prometheus.NewRegistry()
			cfg := Config{Coordinators: []string{sc.addr}, NodeID: "gw-1", Region: "eu-west", ReportInterval: testInterval,
				TokenFile: tf, UntilRules: tt.policy, Logger: logs.logger(), Registerer: reg}
			if tt.policy == UntilRulesStatic {
				cfg.StartupRules = []rules.Rule{startup}
			}
			a, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(context.Background())
			testwait.For(t, 10*time.Second, "five refused reports", func() bool {
				return metricValue(t, reg, "allot_agent_reports_total", "result", "failed") >= 5
			})
			admitted := 0
			for range 5 {
				d := a.Check(Request{Tenant: "acme"})
				switch {
				case d.Allowed:
					admitted++
				case tt.policy == UntilRulesClosed && (!d.NoRules || d.Rule != "" || d.RetryAfter != testInterval):
					t.Errorf("closed: %+v; want a refusal for want of rules, RetryAfter one interval", d)
				case tt.policy == UntilRulesStatic && (d.NoRules || d.Rule != "startup-abuse"):
					t.Errorf("static: %+v; want the start-up rule's refusal", d)
				}
				if tt.policy != UntilRulesStatic && !d.NoRules {
					t.Errorf("%v: %+v; want NoRules", tt.policy, d)
				}
			}
			if admitted != tt.admitted {
				t.Errorf("%d of 5 admitted, want %d", admitted, tt.admitted)
			}
			st := a.Status()
			if st.RulesSource != tt.source || st.RulesReady || st.Ready != tt.ready || st.UntilRules != tt.policy.String() {
				t.Errorf("status %+v: want source %s, rules not ready, ready %v, until_rules %v", st, tt.source, tt.ready, tt.policy)
			}
			if st.ReportsRefused == nil || st.ReportsRefused.Cause != RefusedWrongNode || !strings.Contains(st.ReportsRefused.Fix, `--node-id (NodeID) "gw-1"`) {
				t.Errorf("status reports_refused %+v: want wrong_node, the fix naming --node-id gw-1", st.ReportsRefused)
			}
			if got := metricValue(t, reg, "allot_agent_rules_ready"); got != 0 {
				t.Errorf("allot_agent_rules_ready %v, want 0", got)
			}
			if got := metricValue(t, reg, "allot_agent_until_rules_decisions_total", "policy", tt.label); got != 5 {
				t.Errorf("until_rules decisions{policy=%s} %v, want 5", tt.label, got)
			}
			const refusedLine = "[ERROR] agent: the coordinators refuse this agent's reports: nothing it decides is billed: cause=wrong_node"
			if n := strings.Count(logs.String(), refusedLine); n != 1 {
				t.Errorf("%d ERROR lines for five refused reports, want 1 (once a minute):\n%s", n, logs.String())
			}

			tokenFile(t, tf, sc.tokens["gw-1"])
			testwait.For(t, 10*time.Second, "the cluster's rules", func() bool { return a.Status().RulesSource == "cluster" })
			var last Decision
			admitted = 0
			for range 5 {
				if last = a.Check(Request{Tenant: "globex"}); last.Allowed {
					admitted++
				}
			}
			if admitted == 0 || admitted > 3 || last.Allowed || last.Rule != "cluster-abuse" || last.NoRules {
				t.Errorf("with the cluster's rules: %d of 5 admitted, last %+v; want at most 3, refused by cluster-abuse", admitted, last)
			}
			st = a.Status()
			if !st.RulesReady || !st.Ready || st.ReportsRefused != nil || st.ReportError != "" {
				t.Errorf("status after the token was fixed: %+v", st)
			}
			if got := metricValue(t, reg, "allot_agent_rules_ready"); got != 1 {
				t.Errorf("allot_agent_rules_ready %v, want 1", got)
			}
			if !strings.Contains(logs.String(), "the coordinators accept this agent's reports again") {
				t.Errorf("no line saying reports are accepted again:\n%s", logs.String())
			}
		})
	}
}

// TestReportRefusalCauses: each way the coordinators refuse a credential
// is named, with its fix.
func TestReportRefusalCauses(t *testing.T) {
	sc := newSecuredCluster(t, clusterRulesYAML)
	tests := []struct {
		token, cause, fix string
	}{
		{auth.NewToken(), RefusedUnauthenticated, "--auth-tokens"},
		{sc.tokens["gw-2"], RefusedWrongNode, `allot token --role agent --nodes "gw-1"`},
		{sc.tokens["reader"], RefusedWrongRole, "the credential is not an agent's"},
	}
	for _, tt := range tests {
		t.Run(tt.cause, func(t *testing.T) {
			tf := filepath.Join(t.TempDir(), "token")
			tokenFile(t, tf, tt.token)
			a, err := New(Config{Coordinators: []string{sc.addr}, NodeID: "gw-1", Region: "eu-west", ReportInterval: testInterval, TokenFile: tf})
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close(context.Background())
			testwait.For(t, 10*time.Second, "a refusal", func() bool { return a.Status().ReportsRefused != nil })
			rf := a.Status().ReportsRefused
			if rf.Cause != tt.cause || !strings.Contains(rf.Fix, tt.fix) || rf.Error == "" || rf.Since.IsZero() {
				t.Errorf("refusal %+v: want cause %s and a fix with %q", rf, tt.cause, tt.fix)
			}
			if d := a.Check(Request{Tenant: "acme"}); d.Allowed || !d.NoRules {
				t.Errorf("%+v: want refused for want of rules (closed, the default)", d)
			}
		})
	}
}

// TestEmptyClusterRules: a cluster that has never had rules answers with
// none, and that is its rule set: the agent no longer waits for rules, and
// admits (there is nothing to limit).
func TestEmptyClusterRules(t *testing.T) {
	cs := coordinators(t, 1)
	a, err := New(Config{Coordinators: addrs(cs), NodeID: "gw-1", Region: "eu-west", ReportInterval: testInterval})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.Background())
	select {
	case <-a.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("not ready on a cluster without rules")
	}
	if st := a.Status(); st.RulesSource != "cluster" || !st.RulesReady || len(st.Rules) != 0 {
		t.Errorf("status %+v", st)
	}
	if d := a.Check(Request{Tenant: "acme"}); !d.Allowed || d.NoRules {
		t.Errorf("%+v: want admitted, no rule applying", d)
	}
}

// TestUntilRulesConfig: the policy's fields are checked against the rest,
// each error naming its field.
func TestUntilRulesConfig(t *testing.T) {
	r := rule("q", rules.Tenant, algo.FixedWindow, 5, time.Minute, lease.Quota)
	coords := []string{"127.0.0.1:1"}
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{Coordinators: coords, NodeID: "n", UntilRules: UntilRulesStatic}, "StartupRules: UntilRulesStatic needs"},
		{Config{Coordinators: coords, NodeID: "n", StartupRules: []rules.Rule{r}}, "StartupRules: are enforced only with"},
		{Config{Coordinators: coords, NodeID: "n", UntilRules: 7}, "UntilRules: unknown policy 7"},
		{Config{Coordinators: coords, NodeID: "n", Rules: []rules.Rule{r}, UntilRules: UntilRulesOpen}, "UntilRules: static Rules are enforced from the start"},
		{Config{Coordinators: coords, NodeID: "n", Rules: []rules.Rule{r}, RulesCacheFile: "c.json"}, "RulesCacheFile: caches the cluster's rules"},
		{Config{Rules: []rules.Rule{r}, UntilRules: UntilRulesOpen}, "UntilRules: static Rules"},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			a, err := New(tt.cfg)
			if err == nil {
				a.Close(context.Background())
				t.Fatal("accepted")
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q: want ErrInvalidConfig naming %q", err, tt.field)
			}
		})
	}
	if p, err := ParseUntilRules("static"); err != nil || p != UntilRulesStatic {
		t.Errorf("ParseUntilRules(static) = %v, %v", p, err)
	}
	if _, err := ParseUntilRules("shut"); err == nil || !strings.Contains(err.Error(), "want closed, open or static") {
		t.Errorf("ParseUntilRules(shut): %v", err)
	}
	if UntilRules(0) != UntilRulesClosed {
		t.Error("the zero value must be UntilRulesClosed")
	}
}
