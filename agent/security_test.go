package agent

import (
	"context"
	"fmt"
	"github.com/allot-io/allot/internal/testwait"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/internal/auth"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// TestRefusedCredentialLosesNothing: an agent whose token the
// coordinators refuse keeps deciding and keeps its usage; once its token
// file holds a good token, everything it admitted reaches the ledger,
// exactly once.
func TestRefusedCredentialLosesNothing(t *testing.T) {
	dir := t.TempDir()
	admin, agentTok := auth.NewToken(), auth.NewToken()
	tokens := filepath.Join(dir, "tokens.yaml")
	body := fmt.Sprintf("tokens:\n  - {name: ops, role: admin, token: %s}\n  - {name: gw, role: agent, nodes: gw-1, token: %s}\n", admin, agentTok)
	if err := os.WriteFile(tokens, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	cs := coordinatorsWith(t, 1, func(c *coordinator.Config) { c.AuthTokensFile = tokens })
	tokenFile := filepath.Join(dir, "agent.token")
	write := func(tok string) {
		if err := os.WriteFile(tokenFile+".new", []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tokenFile+".new", tokenFile); err != nil {
			t.Fatal(err)
		}
	}
	write(auth.NewToken()) // not one the coordinators know
	quota := rule("quota", rules.Tenant, algo.FixedWindow, 1_000_000, time.Hour, lease.Quota)
	a := newAgent(t, "gw-1", addrs(cs), func(c *Config) { c.Rules, c.TokenFile = []rules.Rule{quota}, tokenFile })
	var admitted atomic.Int64
	for i := range 300 {
		if a.Check(Request{Tenant: fmt.Sprintf("t%d", i%3)}).Allowed {
			admitted.Add(1)
		}
	}
	time.Sleep(5 * testInterval) // reports go out and are refused; nothing to wait on
	if n := reportsOK(a); n != 0 {
		t.Fatalf("%d reports answered with a refused token", n)
	}
	write(agentTok)
	testwait.For(t, 10*time.Second, "reports to be answered with the good token", func() bool { return reportsOK(a) > 0 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var total uint64
	for _, n := range ledgerAdmitted(ctx, t, cs[0].GRPCAddr(), admin, "quota") {
		total += n
	}
	if total != uint64(admitted.Load()) {
		t.Errorf("ledger holds %d admitted, the agent admitted %d", total, admitted.Load())
	}
}
