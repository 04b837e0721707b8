package allocator

import (
	"testing"
	"time"

	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/proto"
)

// TestEngineMovesStayBounded: a slot moved back and forth many times
// between two engines, as the mover moves it. The map keeps the moves
// under way and the last shard.FinishedMovesKept finished ones, so what
// GetShardMap sends stops growing, and each group's table forgets the
// steps of moves the home group finished.
func TestEngineMovesStayBounded(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	home, err := NewEngine(EngineConfig{Region: "eu", Shards: &EngineShards{Group: "main", Home: true}}, now)
	if err != nil {
		t.Fatal(err)
	}
	g1, err := NewEngine(EngineConfig{Region: "eu", Shards: &EngineShards{Group: "g1"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := home.AddGroup("g1", []string{"g1:1"}); err != nil {
		t.Fatal(err)
	}
	engines := map[string]*Engine{"main": home, "g1": g1}
	acme := uint32(shard.Of("acme"))
	var sizes []int
	const moves = 3 * shard.FinishedMovesKept
	for i := range moves {
		to := []string{"g1", "main"}[i%2]
		mv, err := home.MoveSlots(now, acme, acme, to)
		if err != nil {
			t.Fatal(err)
		}
		for turns := 0; home.StepMoves(now, func(id string) *Engine { return engines[id] }) > 0; turns++ {
			if turns == 10 {
				t.Fatalf("move %d still under way after 10 turns", mv.GetId())
			}
			now = now.Add(MoveStepInterval)
		}
		if got := home.moveByID(mv.GetId()).GetPhase(); got != allotpb.SlotMove_DONE {
			t.Fatalf("move %d ended %v", mv.GetId(), got)
		}
		if i == moves/2 || i == moves-1 {
			sizes = append(sizes, proto.Size(home.ShardMap(0)))
		}
	}
	if n := len(home.ShardMap(0).GetMoves()); n != shard.FinishedMovesKept {
		t.Fatalf("GetShardMap sends %d moves, want the last %d", n, shard.FinishedMovesKept)
	}
	if sizes[1]-sizes[0] > shard.FinishedMovesKept { // wider IDs take a byte more each
		t.Fatalf("GetShardMap's answer grew from %d to %d bytes over %d more moves", sizes[0], sizes[1], moves/2)
	}
	for id, e := range engines {
		if n := e.st.RememberedMoves(); n > 1 {
			t.Fatalf("group %s remembers the steps of %d moves after %d, want the last at most", id, n, moves)
		}
	}
	if home.OwnedSlots() != shard.Slots || g1.OwnedSlots() != 0 {
		t.Fatalf("after an even number of moves: home owns %d slots, g1 %d", home.OwnedSlots(), g1.OwnedSlots())
	}
}
