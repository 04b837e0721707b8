package envoy_test

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/timeutil"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/allot-io/allot/agent"
	"github.com/allot-io/allot/agent/envoy"
	"github.com/allot-io/allot/rules"
	"github.com/allot-io/allot/rules/envoyconf"
)

// serve starts a standalone agent with the rules in yaml and serves its
// RateLimitService on a loopback port, returning a client of it.
func serve(t *testing.T, yaml string, opts envoy.Options) (rlsv3.RateLimitServiceClient, *timeutil.Manual) {
	t.Helper()
	rs, err := rules.Parse("rules.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return serveRules(t, rs, opts)
}

func serveRules(t *testing.T, rs []rules.Rule, opts envoy.Options) (rlsv3.RateLimitServiceClient, *timeutil.Manual) {
	t.Helper()
	conn, clk, _ := start(t, rs, func(g *grpc.Server, a *agent.Agent) { envoy.NewRateLimitServer(a, opts).Register(g) })
	return rlsv3.NewRateLimitServiceClient(conn), clk
}

// start starts a standalone agent on rs, with a manual clock, and a gRPC
// server on a loopback port with what register puts on it; it returns a
// connection to the server.
func start(t *testing.T, rs []rules.Rule, register func(*grpc.Server, *agent.Agent)) (*grpc.ClientConn, *timeutil.Manual, *agent.Agent) {
	t.Helper()
	clk := timeutil.NewManual(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	a, err := agent.New(agent.Config{Rules: rs, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	register(g, a)
	go g.Serve(lis)
	t.Cleanup(g.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, clk, a
}

// desc builds a descriptor from "key=value" pairs.
func desc(pairs ...string) *commonv3.RateLimitDescriptor {
	d := &commonv3.RateLimitDescriptor{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		d.Entries = append(d.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

func ask(t *testing.T, c rlsv3.RateLimitServiceClient, domain string, ds ...*commonv3.RateLimitDescriptor) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

// codes lists a response's per-descriptor codes, e.g. "OK OVER_LIMIT".
func codesOf(resp *rlsv3.RateLimitResponse) string {
	var out []string
	for _, s := range resp.GetStatuses() {
		out = append(out, s.GetCode().String())
	}
	return strings.Join(out, " ")
}

// The configuration of envoyproxy/ratelimit's README, examples 1–4, as
// Allot rules (what `allot rules import --from envoy-ratelimit` writes).
const readmeRules = `
rules:
  # Example 1: database=users 500/s; any other database 500/s each.
  - {name: mongo-users, scope: descriptor, match: {domain: mongo_cps, descriptors: [{key: database, value: users}]}, algorithm: fixed_window, limit: 500, period: 1s, intent: capacity}
  - {name: mongo-default, scope: descriptor, match: {domain: mongo_cps, descriptors: [{key: database, value: default}]}, algorithm: fixed_window, limit: 500, period: 1s, intent: capacity}
  # Example 2: marketing messages 5/day per number; any message 100/day per number.
  - {name: marketing, scope: descriptor, match: {domain: messaging, descriptors: [{key: message_type, value: marketing}, {key: to_number}]}, algorithm: fixed_window, limit: 5, period: 24h, intent: capacity}
  - {name: to-number, scope: descriptor, match: {domain: messaging, descriptors: [{key: to_number}]}, algorithm: fixed_window, limit: 100, period: 24h, intent: capacity}
  # Example 3: 10/s per remote address, one address unlimited, one 50/s.
  - {name: per-address, scope: descriptor, match: {domain: edge_proxy_per_ip, descriptors: [{key: remote_address}]}, algorithm: fixed_window, limit: 10, period: 1s, intent: abuse}
  - {name: trusted, scope: descriptor, match: {domain: edge_proxy_per_ip, descriptors: [{key: remote_address, value: 10.0.0.1}]}, unlimited: true}
  - {name: partner, scope: descriptor, match: {domain: edge_proxy_per_ip, descriptors: [{key: remote_address, value: 10.0.0.2}]}, algorithm: fixed_window, limit: 50, period: 1s, intent: abuse}
  # Example 4: header-matched paths, with a wildcard.
  - {name: foo-paths, scope: descriptor, match: {domain: paths, descriptors: [{key: path, value: /foo/*}]}, algorithm: fixed_window, limit: 2, period: 1m, intent: capacity}
  - {name: foo-bar, scope: descriptor, match: {domain: paths, descriptors: [{key: path, value: /foo/bar}]}, algorithm: fixed_window, limit: 1, period: 1m, intent: capacity}
  # Shadow and replaces.
  - {name: shadowed, scope: descriptor, match: {domain: trial, descriptors: [{key: user}]}, algorithm: fixed_window, limit: 1, period: 1m, intent: capacity, shadow: true}
  - {name: per-api-key, scope: descriptor, match: {domain: replaces, descriptors: [{key: api_key}]}, algorithm: fixed_window, limit: 1, period: 1m, intent: capacity}
  - {name: premium, scope: descriptor, match: {domain: replaces, descriptors: [{key: plan, value: premium}]}, algorithm: fixed_window, limit: 3, period: 1m, intent: capacity, replaces: [per-api-key]}
  # An ordinary rule does not apply to Envoy descriptors.
  - {name: everyone, scope: global, algorithm: fixed_window, limit: 1, period: 1h, intent: capacity}
`

// readmeConfig is readmeRules as envoyproxy/ratelimit's configuration,
// one file per domain.
var readmeConfig = []envoyconf.File{
	{Name: "mongo_cps.yaml", Data: []byte(`domain: mongo_cps
descriptors:
  - {key: database, value: users, rate_limit: {unit: second, requests_per_unit: 500}}
  - {key: database, value: default, rate_limit: {unit: second, requests_per_unit: 500}}
`)},
	{Name: "messaging.yaml", Data: []byte(`domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - {key: to_number, rate_limit: {unit: day, requests_per_unit: 5}}
  - {key: to_number, rate_limit: {unit: day, requests_per_unit: 100}}
`)},
	{Name: "edge.yaml", Data: []byte(`domain: edge_proxy_per_ip
descriptors:
  - {key: remote_address, rate_limit: {unit: second, requests_per_unit: 10}}
  - {key: remote_address, value: 10.0.0.1, rate_limit: {unlimited: true}}
  - {key: remote_address, value: 10.0.0.2, rate_limit: {unit: second, requests_per_unit: 50}}
`)},
	{Name: "paths.yaml", Data: []byte(`domain: paths
descriptors:
  - {key: path, value: /foo/*, rate_limit: {unit: minute, requests_per_unit: 2}}
  - {key: path, value: /foo/bar, rate_limit: {unit: minute, requests_per_unit: 1}}
`)},
	{Name: "trial.yaml", Data: []byte(`domain: trial
descriptors:
  - {key: user, shadow_mode: true, rate_limit: {unit: minute, requests_per_unit: 1}}
`)},
	{Name: "replaces.yaml", Data: []byte(`domain: replaces
descriptors:
  - {key: api_key, rate_limit: {name: per-api-key, unit: minute, requests_per_unit: 1}}
  - {key: plan, value: premium, rate_limit: {name: premium, unit: minute, requests_per_unit: 3, replaces: [{name: per-api-key}]}}
`)},
}

// TestShouldRateLimitAsEnvoyproxyRatelimit: descriptors get the answers
// envoyproxy/ratelimit gives for the same configuration, with rules
// written by hand and with rules imported from ratelimit's configuration
// (allot rules import --from envoy-ratelimit).
func TestShouldRateLimitAsEnvoyproxyRatelimit(t *testing.T) {
	handWritten, err := rules.Parse("rules.yaml", []byte(readmeRules))
	if err != nil {
		t.Fatal(err)
	}
	imported, warnings, err := envoyconf.Import(readmeConfig, envoyconf.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range warnings {
		t.Logf("import warning: %v", w)
	}
	everyone, _ := rules.Parse("everyone.yaml", []byte("rules:\n  - {name: everyone, scope: global, algorithm: fixed_window, limit: 1, period: 1h, intent: capacity}\n"))
	imported = append(imported, everyone...)
	for name, rs := range map[string][]rules.Rule{"hand-written": handWritten, "imported": imported} {
		t.Run(name, func(t *testing.T) { asRatelimit(t, rs) })
	}
}

func asRatelimit(t *testing.T, rs []rules.Rule) {
	type step struct {
		domain string
		descs  [][]string
		times  int    // the same request, this many times
		want   string // codes of the last one
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"exact value 500/s", []step{
			{"mongo_cps", [][]string{{"database=users"}}, 500, "OK"},
			{"mongo_cps", [][]string{{"database=users"}}, 1, "OVER_LIMIT"},
			{"mongo_cps", [][]string{{"database=default"}}, 1, "OK"},
			{"mongo_cps", [][]string{{"database=other"}}, 1000, "OK"}, // no rule: unlimited
		}},
		{"nested: the deepest match applies, per value", []step{
			{"messaging", [][]string{{"message_type=marketing", "to_number=2061234567"}}, 5, "OK"},
			{"messaging", [][]string{{"message_type=marketing", "to_number=2061234567"}}, 1, "OVER_LIMIT"},
			{"messaging", [][]string{{"message_type=marketing", "to_number=2069999999"}}, 1, "OK"},
			{"messaging", [][]string{{"message_type=marketing"}}, 10, "OK"}, // a node without a limit
			{"messaging", [][]string{{"to_number=2061234567"}}, 100, "OK"},
			{"messaging", [][]string{{"to_number=2061234567"}}, 1, "OVER_LIMIT"},
		}},
		{"each descriptor on its own", []step{
			{"messaging", [][]string{{"message_type=marketing", "to_number=1"}, {"to_number=1"}}, 5, "OK OK"},
			{"messaging", [][]string{{"message_type=marketing", "to_number=1"}, {"to_number=1"}}, 1, "OVER_LIMIT OK"},
		}},
		{"exact value before any value; unlimited", []step{
			{"edge_proxy_per_ip", [][]string{{"remote_address=10.0.0.9"}}, 10, "OK"},
			{"edge_proxy_per_ip", [][]string{{"remote_address=10.0.0.9"}}, 1, "OVER_LIMIT"},
			{"edge_proxy_per_ip", [][]string{{"remote_address=10.0.0.2"}}, 50, "OK"},
			{"edge_proxy_per_ip", [][]string{{"remote_address=10.0.0.2"}}, 1, "OVER_LIMIT"},
			{"edge_proxy_per_ip", [][]string{{"remote_address=10.0.0.1"}}, 1000, "OK"},
		}},
		{"exact before prefix; a prefix keys each value", []step{
			{"paths", [][]string{{"path=/foo/bar"}}, 1, "OK"},
			{"paths", [][]string{{"path=/foo/bar"}}, 1, "OVER_LIMIT"},
			{"paths", [][]string{{"path=/foo/baz"}}, 2, "OK"},
			{"paths", [][]string{{"path=/foo/baz"}}, 1, "OVER_LIMIT"},
			{"paths", [][]string{{"path=/foo/qux"}}, 1, "OK"},
			{"paths", [][]string{{"path=/bar"}}, 5, "OK"},
		}},
		{"shadow counts and admits", []step{
			{"trial", [][]string{{"user=ann"}}, 5, "OK"},
		}},
		{"replaces", []step{
			{"replaces", [][]string{{"api_key=k1"}}, 1, "OK"},
			{"replaces", [][]string{{"api_key=k1"}}, 1, "OVER_LIMIT"},
			{"replaces", [][]string{{"api_key=k1"}, {"plan=premium"}}, 3, "OK OK"},
			{"replaces", [][]string{{"api_key=k1"}, {"plan=premium"}}, 1, "OK OVER_LIMIT"},
		}},
		{"no domain's rules", []step{
			{"nowhere", [][]string{{"a=b"}}, 3, "OK"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := serveRules(t, rs, envoy.Options{})
			for _, s := range tc.steps {
				var ds []*commonv3.RateLimitDescriptor
				for _, d := range s.descs {
					ds = append(ds, desc(d...))
				}
				var resp *rlsv3.RateLimitResponse
				for range s.times {
					resp = ask(t, c, s.domain, ds...)
				}
				if got := codesOf(resp); got != s.want {
					t.Fatalf("%s %v ×%d: got %s, want %s", s.domain, s.descs, s.times, got, s.want)
				}
				wantOverall := rlsv3.RateLimitResponse_OK
				if strings.Contains(s.want, "OVER_LIMIT") {
					wantOverall = rlsv3.RateLimitResponse_OVER_LIMIT
				}
				if resp.GetOverallCode() != wantOverall {
					t.Fatalf("overall %v, want %v", resp.GetOverallCode(), wantOverall)
				}
			}
		})
	}
}

// TestGreedyWalk: like envoyproxy/ratelimit's tree walk, a more specific
// first entry is chosen even when only a less specific one has a rule for
// the whole descriptor; there is no backtracking.
func TestGreedyWalk(t *testing.T) {
	c, _ := serve(t, `
rules:
  - {name: any-then-b, scope: descriptor, match: {domain: d, descriptors: [{key: a}, {key: b}]}, algorithm: fixed_window, limit: 1, period: 1m, intent: capacity}
  - {name: exact-then-c, scope: descriptor, match: {domain: d, descriptors: [{key: a, value: x}, {key: c}]}, algorithm: fixed_window, limit: 1, period: 1m, intent: capacity}
`, envoy.Options{})
	for range 3 {
		if got := codesOf(ask(t, c, "d", desc("a=x", "b=1"))); got != "OK" {
			t.Fatalf("a=x,b=1 got %s: a=x walks into exact-then-c, which has no b", got)
		}
	}
	ask(t, c, "d", desc("a=y", "b=1"))
	if got := codesOf(ask(t, c, "d", desc("a=y", "b=1"))); got != "OVER_LIMIT" {
		t.Fatalf("a=y,b=1 got %s, want OVER_LIMIT", got)
	}
}

// TestStatuses: each descriptor's status carries its limit, what remains
// and when it resets, and the headers Envoy adds when asked for.
func TestStatuses(t *testing.T) {
	c, clk := serve(t, `
rules:
  - {name: per-user, scope: descriptor, match: {domain: api, descriptors: [{key: user}]}, algorithm: fixed_window, limit: 3, period: 1m, intent: quota}
  - {name: tenth, scope: descriptor, match: {domain: api, descriptors: [{key: route}]}, algorithm: fixed_window, limit: 5, period: 10s, intent: capacity}
  - {name: half, scope: descriptor, match: {domain: api, descriptors: [{key: fast}]}, algorithm: token_bucket, limit: 10, period: 500ms, intent: capacity}
`, envoy.Options{Headers: true})
	clk.Advance(15 * time.Second) // 15 s into the minute
	resp := ask(t, c, "api", desc("user=ann"), desc("route=/a"), desc("fast=1"), desc("nothing=1"))
	if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("overall %v", resp.GetOverallCode())
	}
	st := resp.GetStatuses()
	if l := st[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 3 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.GetName() != "per-user" || l.GetUnitMultiplier() != nil {
		t.Fatalf("per-user limit %v", l)
	}
	if st[0].GetLimitRemaining() != 2 || st[0].GetDurationUntilReset().AsDuration() != 45*time.Second {
		t.Fatalf("per-user remaining %d reset %v", st[0].GetLimitRemaining(), st[0].GetDurationUntilReset().AsDuration())
	}
	if l := st[1].GetCurrentLimit(); l.GetRequestsPerUnit() != 5 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND || l.GetUnitMultiplier().GetValue() != 10 {
		t.Fatalf("tenth limit %v", l)
	}
	if l := st[2].GetCurrentLimit(); l.GetRequestsPerUnit() != 20 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Fatalf("half limit %v: 10 per 500ms is 20/s", l)
	}
	if st[3].GetCurrentLimit() != nil || st[3].GetCode() != rlsv3.RateLimitResponse_OK {
		t.Fatalf("unmatched status %v", st[3])
	}
	hdr := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		hdr[h.GetKey()] = h.GetValue()
	}
	if hdr["RateLimit-Limit"] != "3" || hdr["RateLimit-Remaining"] != "2" || hdr["RateLimit-Reset"] != "45" {
		t.Fatalf("headers %v: want the tightest descriptor's (per-user)", hdr)
	}
	ask(t, c, "api", desc("user=ann"))
	ask(t, c, "api", desc("user=ann"))
	resp = ask(t, c, "api", desc("user=ann"))
	hdr = map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		hdr[h.GetKey()] = h.GetValue()
	}
	if codesOf(resp) != "OVER_LIMIT" || hdr["Retry-After"] != "45" || hdr["RateLimit-Remaining"] != "0" {
		t.Fatalf("refusal %s headers %v", codesOf(resp), hdr)
	}
}

// TestHitsAddend: the request's hits_addend is every descriptor's cost,
// and a descriptor's own overrides it.
func TestHitsAddend(t *testing.T) {
	c, _ := serve(t, `
rules:
  - {name: bytes, scope: descriptor, match: {domain: d, descriptors: [{key: k}]}, algorithm: fixed_window, limit: 100, period: 1m, intent: quota}
`, envoy.Options{})
	resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc("k=a")}, HitsAddend: 60})
	if err != nil || codesOf(resp) != "OK" || resp.GetStatuses()[0].GetLimitRemaining() != 40 {
		t.Fatalf("hits_addend 60: %v %v", resp, err)
	}
	d := desc("k=a")
	d.HitsAddend = wrapperspb.UInt64(41)
	resp, err = c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{d}, HitsAddend: 1})
	if err != nil || codesOf(resp) != "OVER_LIMIT" {
		t.Fatalf("descriptor hits_addend 41 of 40 left: %v %v", resp, err)
	}
	// A descriptor's hits_addend of 0 asks without spending.
	peek := desc("k=a")
	peek.HitsAddend = wrapperspb.UInt64(0)
	for range 3 {
		resp, err = c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{peek}, HitsAddend: 50})
		if err != nil || codesOf(resp) != "OK" || resp.GetStatuses()[0].GetLimitRemaining() != 40 {
			t.Fatalf("a peek: %v %v; want OK with 40 left, nothing spent", resp, err)
		}
	}
}

// TestInvalidRequests: malformed requests are INVALID_ARGUMENT naming
// the field, and count against nothing.
func TestInvalidRequests(t *testing.T) {
	c, _ := serve(t, `
rules:
  - {name: one, scope: descriptor, match: {domain: d, descriptors: [{key: k}]}, algorithm: fixed_window, limit: 1, period: 1m, intent: quota}
`, envoy.Options{})
	many := make([]*commonv3.RateLimitDescriptor, envoy.MaxDescriptors+1)
	for i := range many {
		many[i] = desc("k=a")
	}
	long := make([]string, envoy.MaxEntries+1)
	for i := range long {
		long[i] = "k=a"
	}
	huge := desc("k=a")
	huge.HitsAddend = wrapperspb.UInt64(1 << 40)
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string
	}{
		{"no domain", &rlsv3.RateLimitRequest{Descriptors: []*commonv3.RateLimitDescriptor{desc("k=a")}}, "domain"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "d"}, "descriptors"},
		{"too many descriptors", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: many}, "at most 64"},
		{"too many entries", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{desc(long...)}}, "entries"},
		{"huge hits_addend", &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*commonv3.RateLimitDescriptor{huge}}, "hits_addend"},
	} {
		_, err := c.ShouldRateLimit(context.Background(), tc.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT naming %q", tc.name, err, tc.want)
		}
	}
	if got := codesOf(ask(t, c, "d", desc("k=a"))); got != "OK" {
		t.Fatalf("after the invalid requests: %s; they must not have counted", got)
	}
	// A value of any length, from a header a client controls, is decided
	// under its own key.
	big := desc("k=" + strings.Repeat("v", 100_000))
	if got := codesOf(ask(t, c, "d", big, big)); got != "OK OVER_LIMIT" {
		t.Fatalf("a 100 kB value twice: %s, want OK OVER_LIMIT", got)
	}
}

// TestManyRulesOneDomain: a domain with more descriptor rules than fit
// one word of candidates still finds the right one.
func TestManyRulesOneDomain(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range 100 {
		fmt.Fprintf(&b, "  - {name: r%d, scope: descriptor, match: {domain: d, descriptors: [{key: k, value: v%d}]}, algorithm: fixed_window, limit: %d, period: 1m, intent: capacity}\n", i, i, i+1)
	}
	c, _ := serve(t, b.String(), envoy.Options{})
	for _, i := range []int{0, 63, 64, 99} {
		st := ask(t, c, "d", desc(fmt.Sprintf("k=v%d", i))).GetStatuses()[0]
		if st.GetCurrentLimit().GetName() != fmt.Sprintf("r%d", i) || st.GetCurrentLimit().GetRequestsPerUnit() != uint32(i+1) {
			t.Errorf("k=v%d decided by %v", i, st.GetCurrentLimit())
		}
	}
}

// limited is a descriptor with a limit of its own.
func limited(d *commonv3.RateLimitDescriptor, n uint32, unit typev3.RateLimitUnit, multiplier uint32) *commonv3.RateLimitDescriptor {
	d.Limit = &commonv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: n, Unit: unit}
	if multiplier > 0 {
		d.Limit.UnitMultiplier = wrapperspb.UInt32(multiplier)
	}
	return d
}

// TestDescriptorLimit: a descriptor's limit replaces its rule's for its
// key, which is the rule's key under that limit, counted apart from the
// rule's; the status tells the descriptor's limit; a unit of UNKNOWN is
// no limit (the rule's applies); a limit of 0 refuses; a descriptor no
// rule applies to is admitted whatever its limit.
func TestDescriptorLimit(t *testing.T) {
	c, _ := serve(t, `
rules:
  - {name: per-user, scope: descriptor, match: {domain: api, descriptors: [{key: user}]}, algorithm: fixed_window, limit: 3, period: 1m, intent: quota}
`, envoy.Options{})
	for i, want := range []string{"OK", "OK", "OVER_LIMIT"} {
		resp := ask(t, c, "api", limited(desc("user=ann"), 2, typev3.RateLimitUnit_HOUR, 0))
		if codesOf(resp) != want {
			t.Fatalf("request %d under 2/h: %s, want %s", i+1, codesOf(resp), want)
		}
		if l := resp.GetStatuses()[0].GetCurrentLimit(); l.GetRequestsPerUnit() != 2 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR || l.GetName() != "per-user" {
			t.Fatalf("current limit %v; want 2 per HOUR under per-user", l)
		}
	}
	// The rule's own 3/min is another key: untouched.
	for i, want := range []string{"OK", "OK", "OK", "OVER_LIMIT"} {
		if got := codesOf(ask(t, c, "api", desc("user=ann"))); got != want {
			t.Fatalf("request %d under the rule's 3/min: %s, want %s", i+1, got, want)
		}
	}
	// UNKNOWN is no limit: the rule's key, spent.
	if got := codesOf(ask(t, c, "api", limited(desc("user=ann"), 100, typev3.RateLimitUnit_UNKNOWN, 0))); got != "OVER_LIMIT" {
		t.Fatalf("a limit of unit UNKNOWN: %s; want the rule's, spent", got)
	}
	// unit_multiplier: 5 per 2 minutes.
	resp := ask(t, c, "api", limited(desc("user=bob"), 5, typev3.RateLimitUnit_MINUTE, 2))
	if l := resp.GetStatuses()[0].GetCurrentLimit(); codesOf(resp) != "OK" || l.GetRequestsPerUnit() != 5 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE || l.GetUnitMultiplier().GetValue() != 2 {
		t.Fatalf("%s, current limit %v; want 5 per 2 MINUTE", codesOf(resp), l)
	}
	// 0 refuses.
	resp = ask(t, c, "api", limited(desc("user=cy"), 0, typev3.RateLimitUnit_SECOND, 0))
	if l := resp.GetStatuses()[0].GetCurrentLimit(); codesOf(resp) != "OVER_LIMIT" || l.GetRequestsPerUnit() != 0 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
		t.Fatalf("a limit of 0: %s, current limit %v", codesOf(resp), l)
	}
	// No rule: admitted, as any descriptor no rule applies to.
	for range 3 {
		if got := codesOf(ask(t, c, "api", limited(desc("tenant=acme"), 1, typev3.RateLimitUnit_HOUR, 0))); got != "OK" {
			t.Fatalf("a limit on a descriptor no rule applies to: %s", got)
		}
	}
}
