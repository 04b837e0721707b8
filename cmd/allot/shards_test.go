package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/shard"
)

// shardGroupProc is one shard group of `allot coordinator` processes,
// whose leader the test SIGKILLs and starts again from its data directory.
type shardGroupProc struct {
	id      string
	members []*shardMember
}

type shardMember struct {
	m    member
	args []string
}

func (m *shardMember) start(t *testing.T, env []string) {
	t.Helper()
	m.m.proc = startProcess(t, env, "coordinator-"+m.m.id, m.args...)
}

// addrs are the group's members' gRPC addresses, comma-separated.
func (g *shardGroupProc) addrs() string {
	var out []string
	for _, m := range g.members {
		out = append(out, m.m.grpc)
	}
	return strings.Join(out, ",")
}

// leader is the member the group names as its leader, or its first.
func (g *shardGroupProc) leader(t *testing.T, env []string) *shardMember {
	t.Helper()
	if len(g.members) == 1 {
		return g.members[0]
	}
	code, stdout, _ := runAllot(t, env, "status", "--format", "json", "--coordinator", g.addrs())
	var cs clusterStatus
	if code == exitOK && json.Unmarshal([]byte(stdout), &cs) == nil {
		for _, m := range g.members {
			if m.m.id == cs.LeaderID {
				return m
			}
		}
	}
	return g.members[0]
}

// killLeader SIGKILLs the group's leader and starts it again.
func (g *shardGroupProc) killLeader(t *testing.T, env []string) string {
	t.Helper()
	m := g.leader(t, env)
	if err := m.m.proc.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.m.proc.done
	m.start(t, env)
	return m.m.id
}

// TestShardsProcess splits a region as an operator would: three shard
// groups of `allot coordinator` processes (one member each; three with
// ALLOT_SHARD_MEMBERS=3, as make chaos runs it), three sidecars, and
// slots moved back and forth between the groups under load while the
// source's, the target's or the home group's (the mover's) leader is
// SIGKILLed during the move and started again from its data directory.
// Every move ends done; the groups' ledgers, summed by `allot usage`, hold
// exactly what the sidecars answered as admitted, tenant by tenant; and a
// tenant over its quota stays within its token bucket, second by second.
func TestShardsProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three coordinator groups and three sidecars")
	}
	// make test runs three moves, one per kind of victim, on groups of
	// one member; make chaos runs more on groups of three.
	moves, size := 3, 1
	if n, err := strconv.Atoi(os.Getenv("ALLOT_SHARD_MOVES")); err == nil && n > 0 {
		moves = n
	}
	if n, err := strconv.Atoi(os.Getenv("ALLOT_SHARD_MEMBERS")); err == nil && n > 0 {
		size = n
	}
	rulesFile := writeTemp(t, "rules.yaml", `rules:
  - name: plan-quota
    scope: tenant
    algorithm: token_bucket
    limit: 200
    period: 1s
    burst: 200
    intent: quota
`)
	env := cliEnv()
	addrs := loopbackAddrs(t, 3*3*size+3)
	sidecarBase := 3 * 3 * size
	var groups []*shardGroupProc
	for i, id := range []string{"main", "g1", "g2"} {
		g := &shardGroupProc{id: id}
		var join []string
		for j := range size {
			k := 3 * (i*size + j)
			g.members = append(g.members, &shardMember{m: member{id: fmt.Sprintf("%s-%d", id, j+1), raft: addrs[k], grpc: addrs[k+1], http: addrs[k+2]}})
			join = append(join, addrs[k+1])
		}
		for _, m := range g.members {
			m.args = []string{"coordinator", "--node-id", m.m.id, "--data-dir", t.TempDir(), "--region", "eu",
				"--raft-addr", m.m.raft, "--grpc-addr", m.m.grpc, "--http-addr", m.m.http, "--report-interval", "200ms", "--billing-window", "1m"}
			if size == 1 {
				m.args = append(m.args, "--bootstrap")
			} else {
				m.args = append(m.args, "--bootstrap-expect", strconv.Itoa(size), "--join", strings.Join(join, ","))
			}
			if id == "main" {
				m.args = append(m.args, "--rules", rulesFile)
			} else {
				m.args = append(m.args, "--group", id, "--shard-home", groups[0].addrs())
			}
			m.start(t, env)
		}
		groups = append(groups, g)
	}
	home := groups[0].addrs()
	procs := func() []*process {
		var ps []*process
		for _, g := range groups {
			for _, m := range g.members {
				ps = append(ps, m.m.proc)
			}
		}
		return ps
	}
	allot := func(args ...string) (bool, string) {
		code, stdout, stderr := runAllot(t, env, args...)
		return code == exitOK, stdout + stderr
	}
	for _, g := range groups[1:] {
		eventually(t, "adding group "+g.id, procs(), func() (bool, string) {
			return allot("shards", "add-group", g.id, "--members", g.addrs(), "--coordinator", home)
		})
	}
	// A pinned slot is left out of range moves until it is unpinned.
	if ok, out := allot("shards", "pin", "--tenant", "hot", "--coordinator", home); !ok {
		t.Fatalf("pinning hot's slot: %s", out)
	}
	if ok, out := allot("shards", "move", "0-5460", "--to", "g1", "--coordinator", home); ok || !strings.Contains(out, "pinned") {
		t.Fatalf("a range move over a pinned slot: %s", out)
	}
	if ok, out := allot("shards", "pin", "--tenant", "hot", "--unpin", "--coordinator", home); !ok {
		t.Fatalf("unpinning hot's slot: %s", out)
	}
	var sidecars []*process
	var sidecarAddrs []string
	for i := range 3 {
		a := addrs[sidecarBase+i]
		sidecars = append(sidecars, startProcess(t, env, fmt.Sprintf("sidecar-%d", i), "agent", "--coordinators", home,
			"--node-id", fmt.Sprintf("gw-%d", i), "--region", "eu", "--http-addr", a))
		sidecarAddrs = append(sidecarAddrs, a)
	}
	for i, a := range sidecarAddrs {
		eventually(t, fmt.Sprintf("sidecar %d", i), procs(), func() (bool, string) { return httpOK("http://" + a + "/readyz") })
	}

	// The load: thirty tenants well within their quota, round robin over
	// the sidecars, and one, "hot", far over it on all three.
	const tenants = 30
	admitted := make([]atomic.Int64, tenants+1) // the last is hot
	var hotSecs [600]atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	start := time.Now()
	var wg sync.WaitGroup
	check := func(sidecar, tenant string) bool {
		resp, err := httpClient.Post("http://"+sidecar+"/v1/check", "application/json", strings.NewReader(`{"tenant":"`+tenant+`"}`))
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	for w := range 9 {
		wg.Go(func() {
			for n := w; ctx.Err() == nil; n++ {
				i := n % tenants
				if check(sidecarAddrs[n%3], fmt.Sprintf("tenant-%d", i)) {
					admitted[i].Add(1)
				}
				time.Sleep(2 * time.Millisecond) // well within 200/s each
			}
		})
	}
	for w := range 6 {
		wg.Go(func() {
			for n := w; ctx.Err() == nil; n++ {
				if check(sidecarAddrs[n%3], "hot") {
					admitted[tenants].Add(1)
					hotSecs[int(time.Since(start)/time.Second)%len(hotSecs)].Add(1)
				}
			}
		})
	}

	// Moves back and forth; during each, one participant is killed a
	// little after it starts and started again.
	ranges := [][2]int{{0, shard.Slots/3 - 1}, {shard.Slots / 3, 2*shard.Slots/3 - 1}}
	delays := []time.Duration{0, 50 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond}
	for i := range moves {
		r := ranges[i%2]
		to := []string{"g1", "g2", "main"}[(i/2)%3]
		if i%2 == 1 {
			to = []string{"g2", "main", "g1"}[(i/2)%3]
		}
		slots := fmt.Sprintf("%d-%d", r[0], r[1])
		var victim *shardGroupProc
		switch i % 3 {
		case 0: // the target
			for _, g := range groups {
				if g.id == to {
					victim = g
				}
			}
		case 1: // the home group: the mover
			victim = groups[0]
		case 2: // the source: whoever owns the range now
			ok, out := allot("shards", "status", "--format", "json", "--coordinator", home)
			var st shardsStatus
			if !ok || json.Unmarshal([]byte(out), &st) != nil {
				t.Fatalf("shards status: %s", out)
			}
			victim = groups[0]
			for _, g := range groups {
				if g.id != to && ownsSlot(st, g.id, r[0]) {
					victim = g
				}
			}
		}
		eventually(t, "starting move "+slots+" to "+to, procs(), func() (bool, string) {
			return allot("shards", "move", slots, "--to", to, "--coordinator", home)
		})
		time.Sleep(delays[i%len(delays)])
		killed := victim.killLeader(t, env)
		t.Logf("move %d: slots %s to %s, %s's leader %s SIGKILLed %v after it started", i+1, slots, to, victim.id, killed, delays[i%len(delays)])
		eventually(t, "move "+slots+" to "+to+" to finish", procs(), func() (bool, string) {
			ok, out := allot("shards", "status", "--format", "json", "--coordinator", home)
			var st shardsStatus
			if !ok || json.Unmarshal([]byte(out), &st) != nil || len(st.Moves) < i+1 {
				return false, out
			}
			mv := st.Moves[len(st.Moves)-1]
			if !shard.Active(mv) {
				if mv.GetPhase().String() != "DONE" {
					t.Fatalf("move %d ended %v: %s", mv.GetId(), mv.GetPhase(), mv.GetError())
				}
				return true, ""
			}
			return false, out
		})
	}
	// A rebalance by measured load, carried out under the same load.
	if ok, out := allot("shards", "rebalance", "--sample", "2s", "--tolerance", "0.2", "--max-moves", "2", "--apply", "--coordinator", home); !ok || !strings.Contains(out, "key entries/s") {
		t.Fatalf("allot shards rebalance --apply:\n%s", out)
	} else {
		t.Logf("allot shards rebalance --apply:\n%s", out)
	}
	cancel()
	wg.Wait()
	ok, out := allot("shards", "status", "--coordinator", home)
	if !ok || !strings.Contains(out, "GROUP") || !strings.Contains(out, "done") {
		t.Errorf("allot shards status:\n%s", out)
	}
	t.Logf("allot shards status:\n%s", out)
	if ok, out := allot("status", "--coordinator", groups[1].addrs()); !ok || !strings.Contains(out, "shard group: g1, owning") {
		t.Errorf("allot status of g1 does not show its shard group:\n%s", out)
	}
	elapsed := int(time.Since(start) / time.Second)
	var perSec []int64
	for s := 1; s < elapsed && s < len(hotSecs); s++ {
		perSec = append(perSec, hotSecs[s].Load())
	}
	t.Logf("hot tenant (quota 200/s, slot %d, in the range the odd-numbered moves move), admitted per second through the moves: %v", shard.Of("hot"), perSec)
	// The quota is a token bucket of 200/s with a burst of 200, and its
	// tolerance is 5% (a move's target divides by what the nodes report
	// holding, like a new leader). A second may take what the seconds
	// before it left unspent, up to the burst, and not only the second
	// just before: [195 134 161 155 180 201 231] is legal, since the
	// slow seconds during a move left the bucket full. So the seconds are
	// run through a shadow bucket at 210/s that starts full: a second may
	// take what it holds plus that second's refill, and what is left is
	// capped at the burst. It never holds less than a real bucket would,
	// so it goes negative only when the fleet admitted more than the quota
	// allows over some stretch of seconds. The slack is for the
	// attribution: an admission counts in the second its answer arrived,
	// and up to six answers (one per hot worker) cross each boundary.
	const slack = 20
	shadow := 200.0
	for i, n := range perSec {
		shadow = min(shadow+200*1.05-float64(n), 200)
		if shadow < -slack {
			t.Errorf("the hot tenant was admitted %d in second %d, %.0f over what its 200/s quota, its burst of 200 and the tolerance allow over the seconds before it", n, i+1, -shadow)
		}
		shadow = max(shadow, -slack) // one stretch over does not fail every second after it
	}

	// The bill: every sidecar flushes on SIGTERM; allot usage sums the
	// groups of the region.
	for _, s := range sidecars {
		s.stop(t)
	}
	eventually(t, "the region's bill to hold every admitted unit once", procs(), func() (bool, string) {
		ok, out := allot("usage", "--from", "1h", "--format", "jsonl", "--coordinator", home)
		if !ok {
			return false, out
		}
		billed := map[string]int64{}
		sc := bufio.NewScanner(strings.NewReader(out))
		for sc.Scan() {
			var line struct {
				Tenant   string `json:"tenant"`
				Region   string `json:"region"`
				Admitted int64  `json:"admitted"`
			}
			if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
				return false, err.Error()
			}
			if line.Region != "*" {
				billed[line.Tenant] += line.Admitted
			}
		}
		var diffs []string
		for i := range tenants + 1 {
			name := fmt.Sprintf("tenant-%d", i)
			if i == tenants {
				name = "hot"
			}
			if billed[name] != admitted[i].Load() {
				diffs = append(diffs, fmt.Sprintf("%s billed %d, admitted %d", name, billed[name], admitted[i].Load()))
			}
		}
		return len(diffs) == 0, strings.Join(diffs, "; ")
	})
}

// ownsSlot reports whether group owns slot in a status.
func ownsSlot(st shardsStatus, group string, slot int) bool {
	for _, r := range st.Ranges {
		if r.Group == group && int(r.First) <= slot && slot <= int(r.Last) {
			return true
		}
	}
	return false
}
