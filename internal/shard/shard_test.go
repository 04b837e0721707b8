package shard

import (
	"errors"
	allotpb "github.com/allot-io/allot/proto"
	"hash/fnv"
	"testing"

	"pgregory.net/rapid"
)

func TestOfIsStableAndSpread(t *testing.T) {
	// Fixed values: every agent and group of a region must agree forever,
	// so the function may never change.
	for _, c := range []struct {
		tenant string
		slot   Slot
	}{{"", Slot(14695981039346656037 % Slots)}, {"acme", Of("acme")}} {
		if got := Of(c.tenant); got != c.slot {
			t.Errorf("Of(%q) = %d, want %d", c.tenant, got, c.slot)
		}
	}
	if Of("a") != 11404 { // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c
		t.Errorf("Of(a) = %d, want 11404", Of("a"))
	}
	for _, tenant := range []string{"acme", "tenant-42", "\x00\xff", "a much longer tenant name than most"} {
		h := fnv.New64a()
		h.Write([]byte(tenant))
		if want := Slot(h.Sum64() % Slots); Of(tenant) != want {
			t.Errorf("Of(%q) = %d, hash/fnv says %d", tenant, Of(tenant), want)
		}
	}
	seen := map[Slot]int{}
	for i := 0; i < 100_000; i++ {
		seen[Of("tenant-"+string(rune('a'+i%26))+string(rune(i)))]++
	}
	if len(seen) < Slots*9/10 {
		t.Errorf("100k tenants fell in %d slots of %d", len(seen), Slots)
	}
}

func TestMapRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := Single("main", []string{"127.0.0.1:7400"})
		m.Groups["g1"] = []string{"127.0.0.1:7410"}
		m.Groups["g2"] = nil
		for range rapid.IntRange(0, 8).Draw(t, "moves") {
			a := Slot(rapid.IntRange(0, Slots-1).Draw(t, "a"))
			b := Slot(rapid.IntRange(int(a), Slots-1).Draw(t, "b"))
			g := rapid.SampledFrom([]string{"main", "g1", "g2"}).Draw(t, "g")
			if err := m.Assign(a, b, g); err != nil {
				t.Fatal(err)
			}
		}
		back, err := FromProto(m.Proto())
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for g, n := range back.Count() {
			total += n
			if n != m.Count()[g] {
				t.Fatalf("group %s: %d slots after a round trip, %d before", g, n, m.Count()[g])
			}
		}
		if total != Slots {
			t.Fatalf("%d slots routed, want %d", total, Slots)
		}
		for s := 0; s < Slots; s += 97 {
			if back.Owner(Slot(s)) != m.Owner(Slot(s)) {
				t.Fatalf("slot %d: %s after a round trip, %s before", s, back.Owner(Slot(s)), m.Owner(Slot(s)))
			}
		}
	})
}

func TestFromProtoRefuses(t *testing.T) {
	good := func() *Map { m := Single("main", nil); m.Groups["g1"] = nil; return m }
	cases := []struct {
		name string
		mess func(pm *allotpb.ShardMap)
	}{
		{"wrong slot count", func(pm *allotpb.ShardMap) { pm.Slots = 1024 }},
		{"gap", func(pm *allotpb.ShardMap) {
			pm.Ranges[0].Last = 10
			pm.Ranges = append(pm.Ranges[:1], pm.Ranges[0])
			pm.Ranges[1].First = 12
		}},
		{"unknown group", func(pm *allotpb.ShardMap) { pm.Ranges[0].Group = "nope" }},
		{"short", func(pm *allotpb.ShardMap) { pm.Ranges[0].Last = 100 }},
		{"unknown home", func(pm *allotpb.ShardMap) { pm.Home = "x" }},
		{"bad group id", func(pm *allotpb.ShardMap) { pm.Groups[0].Id = "a b" }},
		{"duplicate group", func(pm *allotpb.ShardMap) { pm.Groups[1].Id = pm.Groups[0].Id }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pm := good().Proto()
			c.mess(pm)
			if _, err := FromProto(pm); !errors.Is(err, ErrInvalid) {
				t.Fatalf("FromProto = %v, want ErrInvalid", err)
			}
		})
	}
}

func TestParseRange(t *testing.T) {
	for _, c := range []struct {
		in          string
		first, last Slot
		ok          bool
	}{{"5", 5, 5, true}, {"0-16383", 0, 16383, true}, {"10-3", 0, 0, false}, {"16384", 0, 0, false}, {"x", 0, 0, false}, {"-1", 0, 0, false}, {"5x", 0, 0, false}, {"1-2-3", 0, 0, false}, {" 5", 0, 0, false}} {
		f, l, err := ParseRange(c.in)
		if (err == nil) != c.ok || (c.ok && (f != c.first || l != c.last)) {
			t.Errorf("ParseRange(%q) = %d, %d, %v", c.in, f, l, err)
		}
	}
}

func TestPruneMovesKeepsUnderWayAndNewest(t *testing.T) {
	m := Single("main", nil)
	m.Groups["g1"] = nil
	n := uint64(FinishedMovesKept + 20)
	for id := uint64(1); id <= n; id++ {
		p := allotpb.SlotMove_DONE
		if id == 3 || id == n {
			p = allotpb.SlotMove_FROZEN
		}
		m.Moves = append(m.Moves, &allotpb.SlotMove{Id: id, Phase: p})
	}
	shared := m.Moves
	m.PruneMoves()
	if len(m.Moves) != FinishedMovesKept+2 || FindMove(m.Moves, 3) == nil || FindMove(m.Moves, 4) != nil || FindMove(m.Moves, 22) == nil {
		t.Fatalf("kept %d moves; 3 (under way) kept: %v, 4 kept: %v, 22 kept: %v", len(m.Moves), FindMove(m.Moves, 3) != nil, FindMove(m.Moves, 4) != nil, FindMove(m.Moves, 22) != nil)
	}
	if len(shared) != int(n) || shared[3].GetId() != 4 {
		t.Fatal("pruning changed the slice it was given")
	}
	if m.NextMoveID() != n+1 || m.FinishedBelow() != 3 {
		t.Fatalf("next ID %d, finished below %d; want %d and 3", m.NextMoveID(), m.FinishedBelow(), n+1)
	}
	back, err := FromProto(m.Proto())
	if err != nil || len(back.Moves) != len(m.Moves) {
		t.Fatalf("round trip: %v", err)
	}
	pm := m.Proto()
	pm.Moves = []*allotpb.SlotMove{pm.Moves[1], pm.Moves[0]}
	if _, err := FromProto(pm); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a map with moves out of order: %v, want ErrInvalid", err)
	}
}
