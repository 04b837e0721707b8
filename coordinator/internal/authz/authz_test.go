package authz

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/auth"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/metadata"
)

// TestRefusalsLoggedOncePerPeerPerMinute: a flood of refused calls from
// one peer logs once a minute; the peers remembered are bounded.
func TestRefusalsLoggedOncePerPeerPerMinute(t *testing.T) {
	var buf strings.Builder
	now := time.Unix(1_700_000_000, 0)
	l := newPeerLog(hclog.New(&hclog.LoggerOptions{Output: &buf}), func() time.Time { return now })
	for range 100 {
		l.warn("10.0.0.1", "refused a call")
	}
	l.warn("10.0.0.2", "refused a call")
	now = now.Add(time.Minute)
	l.warn("10.0.0.1", "refused a call")
	if n := strings.Count(buf.String(), "refused a call"); n != 3 {
		t.Errorf("%d lines logged, want 3:\n%s", n, buf.String())
	}
	for i := range 2 * maxLoggedPeers {
		l.warn(fmt.Sprintf("peer-%d", i), "refused a call")
	}
	if len(l.last) > maxLoggedPeers {
		t.Errorf("%d peers remembered, bound %d", len(l.last), maxLoggedPeers)
	}
	// The table filled with peers seen this minute: the calls after it
	// are not logged, and cost no scan of it each.
	if l.sweeps > 1 {
		t.Errorf("the full table was swept %d times in one instant, want at most once", l.sweeps)
	}
	now = now.Add(time.Minute)
	l.warn("late-peer", "refused a call")
	if _, ok := l.last["late-peer"]; !ok || l.sweeps != 2 {
		t.Errorf("a minute later the table was not swept (%d sweeps) for a new peer", l.sweeps)
	}
}

// BenchmarkAuthorize is what a credential check adds to each call: one
// token looked up among 50 entries (a SHA-256 and 50 constant-time
// compares), the method's roles, and the node binding of a report.
//
//	go test -run '^$' -bench Authorize -benchmem ./coordinator/internal/authz
func BenchmarkAuthorize(b *testing.B) {
	var body strings.Builder
	body.WriteString("tokens:\n")
	var tok string
	for i := range 50 {
		tok = auth.NewToken()
		fmt.Fprintf(&body, "  - {name: gw%d, role: agent, nodes: gw-%d, token: %s}\n", i, i, tok)
	}
	table, err := auth.ParseTokens("bench", []byte(body.String()))
	if err != nil {
		b.Fatal(err)
	}
	a := &Authorizer{tokens: []func() *auth.Tokens{func() *auth.Tokens { return table }}, now: time.Now,
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "refusals"}, []string{"method", "reason"}), logs: newPeerLog(hclog.NewNullLogger(), time.Now)}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+tok))
	b.ReportAllocs()
	for b.Loop() {
		cctx, err := a.Authorize(ctx, allotpb.AgentService_Report_FullMethodName)
		if err != nil {
			b.Fatal(err)
		}
		if err := a.MayReportAs(cctx, "gw-49", "eu-west"); err != nil {
			b.Fatal(err)
		}
	}
}
