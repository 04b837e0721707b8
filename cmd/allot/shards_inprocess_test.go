package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/internal/shard"
	"github.com/allot-io/allot/internal/testwait"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// startShardGroup starts a one-member coordinator cluster in this process
// as shard group id of the region whose home group is at home ("" starts
// the home group itself), serving HTTP too.
func startShardGroup(t *testing.T, id, home string) *coordinator.Coordinator {
	t.Helper()
	cfg := coordinator.Config{
		NodeID: id + "-1", DataDir: t.TempDir(), Region: "eu", Bootstrap: true,
		RaftAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0",
		ReportInterval: 200 * time.Millisecond, ApplyWindow: 5 * time.Millisecond,
		HeartbeatTimeout: 300 * time.Millisecond, ElectionTimeout: 300 * time.Millisecond,
		BillingWindow: time.Minute,
	}
	if home != "" {
		cfg.Group, cfg.ShardHome = id, []string{home}
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		t.Fatalf("starting group %s: %v", id, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	testwait.For(t, 30*time.Second, id+" to lead", c.IsLeader)
	return c
}

// tenantsInSlots are n tenants, named tenant-K, whose slots are in
// first..last, each in a slot of its own and none next to another's.
func tenantsInSlots(n int, first, last shard.Slot) []string {
	var out []string
	var taken []shard.Slot
next:
	for k := 0; len(out) < n; k++ {
		name := fmt.Sprintf("tenant-%d", k)
		s := shard.Of(name)
		if s < first || s > last {
			continue
		}
		for _, o := range taken {
			if s+1 >= o && s <= o+1 {
				continue next
			}
		}
		out, taken = append(out, name), append(taken, s)
	}
	return out
}

// reportTo sends one report to a group's member: demand for each tenant
// of the rule quota, and, when usage is non-zero, one usage count of the
// first tenant in the billing window now falls in, as batch seq.
func reportTo(ctx context.Context, cc *grpc.ClientConn, group string, seq uint64, usage uint64, tenants ...string) error {
	req := &allotpb.ReportRequest{
		Protocol: allotpb.ProtocolVersion_PROTOCOL_VERSION_1, Node: "gw-" + group, Incarnation: 1, Region: "eu",
		IntervalNano: int64(200 * time.Millisecond), Group: group,
	}
	for _, tn := range tenants {
		req.Demand = append(req.Demand, &allotpb.KeyDemand{Rule: "quota", Key: tn, Tenant: tn, Admitted: 1})
	}
	if usage > 0 {
		now := time.Now()
		req.Usage = &allotpb.UsageBatch{Seq: seq, CutUnixNano: now.UnixNano(), Counts: []*allotpb.UsageCount{
			{Rule: "quota", Tenant: tenants[0], WindowUnix: now.Truncate(time.Minute).Unix(), Admitted: usage},
		}}
	}
	_, err := allotpb.NewAgentServiceClient(cc).Report(ctx, req)
	return err
}

// TestShardsCommandsInProcess runs the shard commands an operator
// splitting a region runs (docs/operations.md#splitting-a-region-into-shard-groups)
// against three real one-member groups in this process: a range move
// over slots another group already holds, a rebalance that has nothing it
// can move, and one group's own part of the ledger, asked for by the CLI
// and over HTTP.
func TestShardsCommandsInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts coordinators")
	}
	mainGroup := startShardGroup(t, "main", "")
	home := mainGroup.GRPCAddr()
	g1, g2 := startShardGroup(t, "g1", home), startShardGroup(t, "g2", home)
	at := []string{"--coordinator", home}
	if code, out, errOut := runIn(t, nil, append([]string{"rules", "put", writeTemp(t, "rules.yaml", "rules:\n"+ruleText("quota"))}, at...)...); code != exitOK {
		t.Fatalf("rules put: %s%s", out, errOut)
	}
	for id, g := range map[string]*coordinator.Coordinator{"g1": g1, "g2": g2} {
		if code, out, errOut := runIn(t, nil, append([]string{"shards", "add-group", id, "--members", g.GRPCAddr()}, at...)...); code != exitOK {
			t.Fatalf("add-group %s: %s%s", id, out, errOut)
		}
	}
	// acme and beta in the half of the region moved below, gamma and
	// delta in the other; each in a slot of its own.
	low, high := tenantsInSlots(2, 1, shard.Slots/2-2), tenantsInSlots(2, shard.Slots/2+1, shard.Slots-2)
	acme, beta, gamma, delta := low[0], low[1], high[0], high[1]
	moved := func(tenant, to string) {
		t.Helper()
		code, out, errOut := runIn(t, nil, append([]string{"shards", "move", "--tenant", tenant, "--to", to, "--wait"}, at...)...)
		if code != exitOK || !strings.Contains(out, ": done") {
			t.Fatalf("moving %s's slot to %s: exit %d\n%s%s", tenant, to, code, out, errOut)
		}
	}
	moved(acme, "g1")
	moved(beta, "g2")

	t.Run("a range move skips what the target holds and moves the rest owner by owner", func(t *testing.T) {
		a, b := shard.Of(acme), shard.Of(beta)
		half := fmt.Sprintf("0-%d", shard.Slots/2-1)
		code, out, errOut := runIn(t, nil, append([]string{"shards", "move", half, "--to", "g1", "--wait"}, at...)...)
		if code != exitOK {
			t.Fatalf("shards move %s --to g1 --wait, after %s's slot moved to g1 and %s's to g2: exit %d\n%s%s", half, acme, beta, code, out, errOut)
		}
		if want := fmt.Sprintf("skipping slot %d, in g1 already\n", a); !strings.HasPrefix(out, want) {
			t.Errorf("the move does not start by saying what it skips (%q):\n%s", want, out)
		}
		// main's slots on either side of acme's and beta's, and beta's
		// from g2: one move per owner's run.
		lo, hi := min(a, b), max(a, b)
		var runs []string
		for _, r := range []struct {
			first, last shard.Slot
			from        string
		}{{0, lo - 1, "main"}, {lo + 1, hi - 1, "main"}, {hi + 1, shard.Slots/2 - 1, "main"}, {b, b, "g2"}} {
			runs = append(runs, fmt.Sprintf("slots %d-%d from %s to g1, planned", r.first, r.last, r.from))
		}
		for _, r := range runs {
			if !strings.Contains(out, r) {
				t.Errorf("no move of %q:\n%s", r, out)
			}
		}
		if n := strings.Count(out, ": done\n"); n != 4 {
			t.Errorf("%d moves done, want 4:\n%s", n, out)
		}
		if got := ownerRanges(t, at); !strings.HasPrefix(got, fmt.Sprintf("0-%d:g1 ", shard.Slots/2-1)) {
			t.Errorf("after the move the map is %s; want g1 to own 0-%d", got, shard.Slots/2-1)
		}
		// Again: every slot is in g1 already.
		code, out, errOut = runIn(t, nil, append([]string{"shards", "move", half, "--to", "g1", "--wait"}, at...)...)
		if code != exitOK || out != fmt.Sprintf("slots %s are in g1 already: nothing to move\n", half) {
			t.Errorf("the same move again: exit %d\n%s%s", code, out, errOut)
		}
	})
	moved(gamma, "g2")

	t.Run("a rebalance that moves nothing says why", func(t *testing.T) {
		// Each round of reports gives every group's leader one key entry
		// per tenant it is sent: g1 (acme) and g2 (gamma) one each, main
		// (delta and another) two, each in a slot of its own, as in a
		// region just split. The mean is 4/3 of a round's; a move may
		// carry a third, and main's lightest slot carries one.
		extra := tenantsInSlots(3, shard.Slots/2+1, shard.Slots-2)[2]
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		defer func() { cancel(); wg.Wait() }()
		type sent struct {
			cc      *grpc.ClientConn
			id      string
			tenants []string
		}
		groups := []sent{{dialGRPC(t, home), "main", []string{delta, extra}}, {dialGRPC(t, g1.GRPCAddr()), "g1", []string{acme}}, {dialGRPC(t, g2.GRPCAddr()), "g2", []string{gamma}}}
		wg.Go(func() {
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for ctx.Err() == nil {
				for _, g := range groups {
					rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
					_ = reportTo(rctx, g.cc, g.id, 0, 0, g.tenants...)
					rcancel()
				}
				select {
				case <-ctx.Done():
				case <-tick.C:
				}
			}
		})
		code, out, errOut := runIn(t, nil, append([]string{"shards", "rebalance", "--sample", "2s"}, at...)...)
		if code != exitOK {
			t.Fatalf("shards rebalance: exit %d\n%s%s", code, out, errOut)
		}
		why := regexp.MustCompile(`main carries [0-9.]+ key entries/s, [0-9]+% above the mean of [0-9.]+ \(--tolerance 10%\), but no move evens it out: ` +
			`each of its unpinned slots with load carries [0-9.]+ or more, and a move to g[12] may carry at most [0-9.]+, or main would end below the mean or g[12] above it: nothing to move\n$`)
		t.Logf("shards rebalance:\n%s", out)
		if strings.Contains(out, "balanced") || !why.MatchString(out) {
			t.Errorf("shards rebalance with main at twice g1's and g2's load, in two slots:\n%s", out)
		}
	})

	t.Run("one group's part of the ledger", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := reportTo(ctx, dialGRPC(t, g1.GRPCAddr()), "g1", 1, 3, acme); err != nil {
			t.Fatalf("usage of %s to g1: %v", acme, err)
		}
		g1At := []string{"--coordinator", g1.GRPCAddr(), "--from", "1h"}
		code, out, errOut := runIn(t, nil, append([]string{"usage"}, g1At...)...)
		if code == exitOK || !strings.Contains(errOut, "allot usage --group-only") {
			t.Errorf("usage of a group that is not home, without --group-only: exit %d, does not name --group-only\n%s%s", code, out, errOut)
		}
		code, out, errOut = runIn(t, nil, append([]string{"usage", "--group-only", "--format", "csv"}, g1At...)...)
		if code != exitOK || !strings.Contains(out, ","+acme+",quota,eu,3,") {
			t.Errorf("usage --group-only of g1: exit %d, want %s's 3 units\n%s%s", code, acme, out, errOut)
		}
		base := "http://" + g1.HTTPAddr() + "/v1/usage"
		for _, tt := range []struct {
			query string
			code  int
			want  string
		}{
			{"", http.StatusBadRequest, "/v1/usage?group_only=true"},
			{"?group_only=true", http.StatusOK, `"tenant":"` + acme + `"`},
			{"?group_only=yes", http.StatusBadRequest, `group_only: want true or false, not \"yes\"`},
		} {
			resp, err := http.Get(base + tt.query)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tt.code || !strings.Contains(string(body), tt.want) {
				t.Errorf("GET /v1/usage%s of g1: %d %s; want %d with %s", tt.query, resp.StatusCode, body, tt.code, tt.want)
			}
		}
	})
}

// ownerRanges is the map's ranges as FIRST-LAST:GROUP, space-separated.
func ownerRanges(t *testing.T, at []string) string {
	t.Helper()
	code, out, errOut := runIn(t, nil, append([]string{"shards", "status", "--format", "json"}, at...)...)
	var st shardsStatus
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("shards status: exit %d\n%s%s", code, out, errOut)
	}
	var parts []string
	for _, r := range st.Ranges {
		parts = append(parts, fmt.Sprintf("%d-%d:%s", r.GetFirst(), r.GetLast(), r.GetGroup()))
	}
	return strings.Join(parts, " ")
}

// dialGRPC is a plaintext connection to addr, closed when the test ends.
func dialGRPC(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// TestRebalanceStopSays: what `allot shards rebalance` prints after its
// proposals, for each reason it proposes no more, on a region of two
// groups (main owning slots below 8192, g1 the rest) and the load given.
func TestRebalanceStopSays(t *testing.T) {
	tests := []struct {
		name   string
		load   map[shard.Slot]float64
		pinned []shard.Slot
		want   string
	}{
		{"balanced", map[shard.Slot]float64{1: 3, 9000: 3.2}, nil, "balanced within 10% of the mean: nothing to move"},
		{"no load", nil, nil, "no group's leader counted a key entry in 10s: no agent reported to any group, so there is no load to balance"},
		// The region: g1 at 2 and main at 4 key entries/s, in two
		// tenants' slots.
		{"no move evens it out", map[shard.Slot]float64{1: 2, 2: 2, 9000: 2}, nil,
			"main carries 4 key entries/s, 33% above the mean of 3 (--tolerance 10%), but no move evens it out: each of its unpinned slots with load carries 2 or more, " +
				"and a move to g1 may carry at most 1, or main would end below the mean or g1 above it: nothing to move"},
		{"all pinned", map[shard.Slot]float64{1: 2, 2: 2, 9000: 1}, []shard.Slot{1, 2},
			"main carries 4 key entries/s, 60% above the mean of 2.5 (--tolerance 10%), but all of it is in pinned slots, which rebalance leaves in place (allot shards pin --unpin): nothing to move"},
		{"max moves", map[shard.Slot]float64{1: 2, 2: 1.5, 3: 2.5}, nil,
			"after these, main carries 3.5 key entries/s, 17% above the mean of 3 (--tolerance 10%): these are the --max-moves 1; run again once they are done"},
		{"balanced after moves", map[shard.Slot]float64{1: 1, 3: 1, 5: 1, 7: 1}, nil, "after these, every group is within 10% of the mean"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := shard.Single("main", nil)
			m.Groups["g1"] = nil
			if err := m.Assign(shard.Slots/2, shard.Slots-1, "g1"); err != nil {
				t.Fatal(err)
			}
			m.Pinned = map[shard.Slot]bool{}
			for _, s := range tt.pinned {
				m.Pinned[s] = true
			}
			var load [shard.Slots]float64
			for s, l := range tt.load {
				load[s] = l
			}
			maxMoves := 8
			if tt.name == "max moves" {
				maxMoves = 1
			}
			plan := shard.Rebalance(m, &load, 0.1, maxMoves)
			for _, p := range plan.Proposals {
				if err := m.Assign(p.First, p.Last, p.To); err != nil {
					t.Fatal(err)
				}
			}
			groups, loads := shard.GroupLoads(m, &load)
			if got := rebalanceStop(plan, groups, loads, 0.1, 10*time.Second, maxMoves); got != tt.want {
				t.Errorf("printed\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}
