package sim

import (
	"strings"
	"testing"

	"github.com/allot-io/allot/internal/shard"
)

const smallShards = `name: small-shards
nodes: 6
duration: 16s
warmup: 2s
interval: 1s
rate: 3000
seed: 5
rule: {algorithm: token_bucket, limit: 40, period: 1s, scope: tenant, intent: quota}
tenants: {count: 120, zipf: 1.2}
traffic: {sticky: 2}
network: {delay: 2ms, jitter: 2ms}
shards: {groups: 4, capacity: 1100000, scale: 100}
events:
  - {at: 8s, move_slots: {first: 0, last: 2047, to: 1}}
`

// TestShardsCountOnce drives a small region of four groups through a move
// of half of group 0's slots under load: every request an agent admitted
// is in exactly one group's ledger, once, and the move is done.
func TestShardsCountOnce(t *testing.T) {
	s, err := Parse("small-shards.yaml", []byte(smallShards))
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEnv(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(movedTenants(e)) == 0 {
		t.Fatal("no tenant in the moved slots: the test moves nothing")
	}
	q, err := newShardLease(e, s.Shards.Groups, false)
	if err != nil {
		t.Fatal(err)
	}
	gen := newTraffic(s)
	admitted := make([]uint64, s.Tenants.Count)
	moved := false
	for gen.peek() < s.Duration {
		at := gen.peek()
		if !moved && at >= s.Events[0].At {
			q.advance(s.Events[0].At)
			q.moveSlots(s.Events[0].At, s.Events[0].MoveSlots)
			moved = true
		}
		q.advance(at)
		r := gen.pop()
		if q.decide(r.at, r.node, r.tenant) {
			admitted[r.tenant]++
		}
	}
	q.advance(s.Duration)
	q.close() // each agent's last report carries what it has not had acknowledged
	res := q.shardsResult(s.Duration)
	if len(res.Moves) != 1 || res.Moves[0].Took < 0 {
		t.Fatalf("moves = %+v, want one done", res.Moves)
	}
	if res.RefusedAsMoved == 0 || res.UsageWaited == 0 {
		t.Errorf("refused as moved %d, usage waited %d: the move happened under no load", res.RefusedAsMoved, res.UsageWaited)
	}
	wantSlots := map[string]int{"g0": 2048, "g1": 4096 + 2048, "g2": 4096, "g3": 4096}
	for _, g := range res.PerGroup {
		if g.Slots != wantSlots[g.Group] {
			t.Errorf("group %s owns %d slots, want %d", g.Group, g.Slots, wantSlots[g.Group])
		}
	}
	var total uint64
	for i, name := range e.tenants {
		var sum uint64
		for _, id := range q.sh.ids {
			a, _ := q.sh.byID[id].Usage(name, e.rule.Name)
			sum += a
		}
		if sum != admitted[i] {
			t.Errorf("tenant %s (slot %d): the groups' ledgers hold %d admitted, the agents admitted %d", name, shard.Of(name), sum, admitted[i])
		}
		total += admitted[i]
	}
	if total == 0 {
		t.Fatal("nothing admitted")
	}
}

func TestShardsScenarioRejects(t *testing.T) {
	tests := []struct{ name, from, to, field string }{
		{"one group", "groups: 4", "groups: 1", "shards"},
		{"move to its own group", "to: 1", "to: 0", "move_slots"},
		{"move across groups", "last: 2047", "last: 5000", "move_slots"},
		{"no such group", "to: 1", "to: 9", "move_slots"},
		{"negative capacity", "capacity: 1100000", "capacity: -1", "shards"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("x.yaml", []byte(strings.Replace(smallShards, tt.from, tt.to, 1)))
			if err == nil || !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("err = %v, want one naming %s", err, tt.field)
			}
		})
	}
	noShards := strings.Replace(smallShards, "shards: {groups: 4, capacity: 1100000, scale: 100}\n", "", 1)
	if _, err := Parse("x.yaml", []byte(noShards)); err == nil || !strings.Contains(err.Error(), "needs shards") {
		t.Fatalf("a move of slots without shards: err = %v", err)
	}
}
