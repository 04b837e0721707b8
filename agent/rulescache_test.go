package agent

import (
	"context"
	"encoding/json"
	"github.com/allot-io/allot/internal/testwait"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
	"github.com/prometheus/client_golang/prometheus"
)

// deadCoordinator is an address where no coordinator answers: a cluster
// out of reach.
const deadCoordinator = "127.0.0.1:1"

// TestRulesCache: the cluster's rules are cached when they arrive; a
// restart with the cluster out of reach enforces them, with the fleet's
// size then, instead of the start-up policy; a restart with the cluster
// back takes the cluster's new rules and caches them; a cache that cannot
// be read is logged at ERROR and the policy applies.
func TestRulesCache(t *testing.T) {
	cs := coordinators(t, 1)
	dir := t.TempDir()
	cache := filepath.Join(dir, "rules-cache.json")
	abuse := rule("login-abuse", rules.Tenant, algo.FixedWindow, 2, time.Hour, lease.Abuse)
	putRules(t, cs[0].GRPCAddr(), abuse)

	first := newAgent(t, "gw-1", addrs(cs), func(c *Config) { c.RulesCacheFile = cache })
	testwait.For(t, 10*time.Second, "the cache written", func() bool { _, err := os.Stat(cache); return err == nil })
	var doc rulesCache
	b, err := os.ReadFile(cache)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil || doc.Format != rulesCacheFormat || doc.Node != "gw-1" || doc.Nodes != 1 || !strings.Contains(string(doc.Rules), `"login-abuse"`) {
		t.Fatalf("cache %s: %v\n%s", cache, err, b)
	}
	if err := first.Close(context.Background()); err != nil {
		t.Fatal(err)
	}

	// The cluster out of reach: the cached rules, not the policy.
	var logs logBuffer
	reg := prometheus.NewRegistry()
	cut, err := New(Config{Coordinators: []string{deadCoordinator}, NodeID: "gw-1", Region: "eu-west", ReportInterval: testInterval,
		RulesCacheFile: cache, Logger: logs.logger(), Registerer: reg, CloseTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer cut.Close(context.Background())
	var ds []Decision
	for range 3 {
		ds = append(ds, cut.Check(Request{Tenant: "acme"}))
	}
	if !ds[0].Allowed || !ds[1].Allowed || ds[2].Allowed || ds[2].Rule != "login-abuse" || ds[2].NoRules {
		t.Errorf("on the cache: %+v; want two admitted, the third refused by login-abuse", ds)
	}
	if st := cut.Status(); st.RulesSource != "cache" || st.RulesReady || !st.Ready || len(st.Rules) != 1 {
		t.Errorf("status on the cache: %+v", st)
	}
	if got := metricValue(t, reg, "allot_agent_until_rules_decisions_total", "policy", "cache"); got != 3 {
		t.Errorf("until_rules decisions{policy=cache} %v, want 3", got)
	}
	testwait.For(t, 10*time.Second, "an ERROR for the unanswered reports", func() bool {
		return strings.Contains(logs.String(), "[ERROR] agent: no coordinator has answered, and this agent does not have the cluster's rules")
	})
	if !strings.Contains(logs.String(), "enforcing the cached rules until the cluster's arrive: file="+cache) {
		t.Errorf("no line saying the cache is enforced:\n%s", logs.String())
	}

	// The cluster back with new rules: they replace the cache's.
	quota := rule("plan-quota", rules.Tenant, algo.FixedWindow, 100, time.Hour, lease.Quota)
	putRules(t, cs[0].GRPCAddr(), abuse, quota)
	back := newAgent(t, "gw-1", addrs(cs), func(c *Config) { c.RulesCacheFile = cache })
	testwait.For(t, 10*time.Second, "the cluster's rules", func() bool { return back.Status().RulesSource == "cluster" && len(back.Status().Rules) == 2 })
	testwait.For(t, 10*time.Second, "the new rules cached", func() bool {
		b, _ := os.ReadFile(cache)
		return strings.Contains(string(b), `"plan-quota"`)
	})
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("the cache's directory holds %d files, want the cache alone (no temporary file left)", len(entries))
	}

	// A cache that cannot be read: logged, and the policy decides.
	if err := os.WriteFile(cache, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	var badLogs logBuffer
	bad, err := New(Config{Coordinators: []string{deadCoordinator}, NodeID: "gw-1", ReportInterval: testInterval, RulesCacheFile: cache, Logger: badLogs.logger(), CloseTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close(context.Background())
	if d := bad.Check(Request{Tenant: "acme"}); d.Allowed || !d.NoRules {
		t.Errorf("with an unreadable cache: %+v; want refused for want of rules (closed)", d)
	}
	if !strings.Contains(badLogs.String(), "[ERROR] agent: the rules cache cannot be read; it is replaced when the cluster's rules arrive: until_rules=closed error=\"agent: rules cache "+cache+": invalid character") {
		t.Errorf("no ERROR naming the cache and what is wrong:\n%s", badLogs.String())
	}
}

// TestReadRulesCacheErrors: each way a cache can be wrong names the file
// and what.
func TestReadRulesCacheErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, body, want string
	}{
		{"format", `{"format":"allot-rules-cache/9","rules":{}}`, `format "allot-rules-cache/9", want "allot-rules-cache/1"`},
		{"nodes", `{"format":"allot-rules-cache/1","nodes":-2,"rules":{}}`, "nodes: must not be negative, got -2"},
		{"rules", `{"format":"allot-rules-cache/1","rules":{"rules":[{"nmae":"x"}]}}`, `rules: proto:`},
		{"json", `[]`, "cannot unmarshal array"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, tt.name+".json")
			if err := os.WriteFile(path, []byte(tt.body), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := readRulesCache(path)
			if err == nil || !strings.Contains(err.Error(), path+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v: want %s and %q", err, path, tt.want)
			}
		})
	}
}
