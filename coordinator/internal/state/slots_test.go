package state

import (
	"errors"
	"strings"
	"testing"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/internal/shard"
	"github.com/allot-io/allot/ledger"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/protobuf/proto"
	"pgregory.net/rapid"
)

func step(op fsmpb.SlotsCommand_Op, id uint64, first, last uint32, group string) *fsmpb.SlotsCommand {
	return &fsmpb.SlotsCommand{Op: op, MoveId: id, First: first, Last: last, Group: group, Peer: "peer", ProposedUnixNano: 1}
}

// homeState is the state of the home group "main" once g1 is in its map:
// a move is planned in the home group's log before its first step.
func homeState(t interface{ Fatal(...any) }) *State {
	s := New()
	if err, ok := s.Apply(CmdShardMap, &fsmpb.ShardMapCommand{Home: "main", AddGroup: &allotpb.ShardGroup{Id: "g1"}}).(error); ok {
		t.Fatal(err)
	}
	return s
}

func TestSlotSteps(t *testing.T) {
	const (
		F = fsmpb.SlotsCommand_FREEZE
		A = fsmpb.SlotsCommand_ACQUIRE
		R = fsmpb.SlotsCommand_RELEASE
		X = fsmpb.SlotsCommand_ABORT
		U = fsmpb.SlotsCommand_UNFREEZE
		E = fsmpb.SlotsCommand_EMPTY
	)
	type st struct {
		cmd     *fsmpb.SlotsCommand
		refused string // "" when the step must be done
		owned   int
	}
	cases := []struct {
		name  string
		steps []st
	}{
		{"source freezes then releases", []st{
			{step(F, 1, 0, 99, "main"), "", shard.Slots - 100},
			{step(F, 1, 0, 99, "main"), "", shard.Slots - 100}, // again: done
			{step(R, 1, 0, 99, "main"), "", shard.Slots - 100},
			{step(R, 1, 0, 99, "main"), "", shard.Slots - 100},
			{step(U, 1, 0, 99, "main"), "has not frozen", shard.Slots - 100},
		}},
		{"source unfreezes an aborted move", []st{
			{step(F, 1, 10, 10, "main"), "", shard.Slots - 1},
			{step(U, 1, 10, 10, "main"), "", shard.Slots},
			{step(R, 1, 10, 10, "main"), "has not frozen", shard.Slots},
		}},
		{"freeze what is not owned", []st{
			{step(F, 1, 0, 9, "main"), "", shard.Slots - 10},
			{step(F, 2, 5, 20, "main"), "does not own", shard.Slots - 10},
		}},
		{"target acquires once", []st{
			{step(E, 0, 0, 0, "g1"), "", 0},
			{step(A, 1, 0, 99, "g1"), "", 100},
			{step(A, 1, 0, 99, "g1"), "", 100},
			{step(X, 1, 0, 99, "g1"), "has acquired", 100},
		}},
		{"an abort wins over a late acquire", []st{
			{step(E, 0, 0, 0, "g1"), "", 0},
			{step(X, 1, 0, 99, "g1"), "", 0},
			{step(A, 1, 0, 99, "g1"), "was aborted", 0},
		}},
		{"a step for another group", []st{
			{step(E, 0, 0, 0, "g1"), "", 0},
			{step(A, 1, 0, 9, "g2"), "not \"g2\"", 0},
		}},
		// A finished move's steps carried again after a later move took
		// the slot back (a stale mover) are done again and change nothing.
		{"target: a finished move's acquire again, after the slot left", []st{
			{step(E, 0, 0, 0, "g1"), "", 0},
			{step(A, 2, 7, 7, "g1"), "", 1},
			{step(F, 4, 7, 7, "g1"), "", 0},
			{step(R, 4, 7, 7, "g1"), "", 0},
			{step(A, 2, 7, 7, "g1"), "", 0},
			{step(F, 5, 7, 7, "g1"), "does not own", 0},
		}},
		{"source: a finished move's release again, after the slot came back", []st{
			{step(F, 2, 7, 7, "main"), "", shard.Slots - 1},
			{step(R, 2, 7, 7, "main"), "", shard.Slots - 1},
			{step(A, 4, 7, 7, "main"), "", shard.Slots},
			{step(R, 2, 7, 7, "main"), "", shard.Slots},
			{step(F, 5, 7, 7, "main"), "", shard.Slots - 1},
		}},
		{"bad range", []st{{step(F, 1, 9, 3, "main"), "not a range", shard.Slots}}},
		{"no group", []st{{step(F, 1, 0, 3, ""), "no valid group", shard.Slots}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New()
			if c.steps[0].cmd.GetGroup() == "main" {
				s = homeState(t)
			}
			for i, x := range c.steps {
				res := s.Apply(CmdSlots, x.cmd).(*fsmpb.SlotsResult)
				if x.refused == "" && (!res.GetDone() || res.GetRefused() != "") {
					t.Fatalf("step %d (%v): refused: %s", i, x.cmd.GetOp(), res.GetRefused())
				}
				if x.refused != "" && (res.GetDone() || !strings.Contains(res.GetRefused(), x.refused)) {
					t.Fatalf("step %d (%v): %+v, want a refusal saying %q", i, x.cmd.GetOp(), res, x.refused)
				}
				if got := s.OwnedSlots(); got != x.owned {
					t.Fatalf("step %d (%v): owns %d slots, want %d", i, x.cmd.GetOp(), got, x.owned)
				}
			}
			// What a group owns survives a snapshot.
			back := roundTrip(t, &machine{st: s}).st
			if back.OwnedSlots() != s.OwnedSlots() || back.Group() != s.Group() {
				t.Fatalf("after a snapshot: %d slots of %q, before %d of %q", back.OwnedSlots(), back.Group(), s.OwnedSlots(), s.Group())
			}
		})
	}
}

// TestMovesCountOnce: two groups, one agent sending usage by a map that
// may be stale, and moves of slots back and forth, each step carried any
// number of times (a mover that crashed and resumed) in any order the
// protocol allows. Every unit is counted by exactly one group, and no
// slot is ever owned by both.
func TestMovesCountOnce(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		groups := map[string]*State{"main": homeState(t), "g1": New()}
		groups["g1"].Apply(CmdSlots, step(fsmpb.SlotsCommand_EMPTY, 0, 0, 0, "g1"))
		tenants := []string{"a", "b", "c", "d", "e", "f"}
		slot := func(tn string) uint32 { return uint32(shard.Of(tn)) }
		owner := map[uint32]string{} // where the mover has the slot, as the map says
		for _, tn := range tenants {
			owner[slot(tn)] = "main"
		}
		seq := map[string]uint64{}
		var sent, queue []*allotpb.UsageCount
		var moveID uint64
		type move struct {
			id       uint64
			sl       uint32
			from, to string
			phase    int // 0 frozen, 1 acquired or aborted
			abort    bool
		}
		var moves []*move
		apply := func(g string, cmd *fsmpb.SlotsCommand) *fsmpb.SlotsResult {
			cmd.Group = g
			return groups[g].Apply(CmdSlots, cmd).(*fsmpb.SlotsResult)
		}
		deliver := func(c *allotpb.UsageCount, g string) bool {
			seq[g]++
			res := groups[g].Apply(CmdReports, &fsmpb.ReportsCommand{ProposedUnixNano: 1e9, Reports: []*fsmpb.AgentUsage{{
				Node: "n", Incarnation: 1, Batch: &allotpb.UsageBatch{Seq: seq[g], Counts: []*allotpb.UsageCount{c}},
			}}}).(*fsmpb.ReportsResult)
			if len(res.GetMoved()) > 0 {
				if res.GetAckedSeq()[0] >= seq[g] {
					t.Fatalf("a refused batch was acknowledged")
				}
				return false
			}
			return true
		}
		n := rapid.IntRange(1, 60).Draw(t, "steps")
		for range n {
			switch rapid.IntRange(0, 3).Draw(t, "what") {
			case 0: // new usage
				c := &allotpb.UsageCount{Rule: "r", Tenant: rapid.SampledFrom(tenants).Draw(t, "tenant"), WindowUnix: 0, Admitted: uint64(rapid.IntRange(1, 9).Draw(t, "n"))}
				sent = append(sent, c)
				queue = append(queue, c)
			case 1: // the agent sends the head, to the map's owner or a stale one
				if len(queue) == 0 {
					continue
				}
				g := owner[slot(queue[0].GetTenant())]
				if rapid.Bool().Draw(t, "stale") {
					g = rapid.SampledFrom([]string{"main", "g1"}).Draw(t, "g")
				}
				if deliver(queue[0], g) {
					queue = queue[1:]
				}
			case 2: // start a move of one tenant's slot
				sl := slot(rapid.SampledFrom(tenants).Draw(t, "moved"))
				busy := false
				for _, m := range moves {
					busy = busy || (m.sl == sl && m.phase < 2)
				}
				if busy {
					continue
				}
				from := owner[sl]
				to := map[string]string{"main": "g1", "g1": "main"}[from]
				moveID++
				if r := apply(from, step(fsmpb.SlotsCommand_FREEZE, moveID, sl, sl, to)); !r.GetDone() {
					t.Fatalf("freeze refused: %s", r.GetRefused())
				}
				moves = append(moves, &move{id: moveID, sl: sl, from: from, to: to, abort: rapid.IntRange(0, 4).Draw(t, "abort") == 0})
			case 3: // move a move on by one step, or repeat its last
				if len(moves) == 0 {
					continue
				}
				m := rapid.SampledFrom(moves).Draw(t, "move")
				repeat := rapid.Bool().Draw(t, "repeat")
				switch {
				case m.abort && (m.phase == 0 || repeat):
					if r := apply(m.to, step(fsmpb.SlotsCommand_ABORT, m.id, m.sl, m.sl, m.from)); !r.GetDone() {
						t.Fatalf("abort refused: %s", r.GetRefused())
					}
					if r := apply(m.from, step(fsmpb.SlotsCommand_UNFREEZE, m.id, m.sl, m.sl, m.to)); !r.GetDone() {
						t.Fatalf("unfreeze refused: %s", r.GetRefused())
					}
					m.phase = 2
				case m.abort:
				case m.phase == 2 && repeat:
					// A finished move's steps carried again (a deposed
					// leader's mover, or one resuming from an old map):
					// each is done again and changes nothing. The move
					// stays finished: the home map never takes a phase
					// back (shardmap.go), so the mover never records it
					// done, nor routes the slot to its target, a second
					// time. This case once set phase 1 again, and the
					// next draw moved the model's map back to the target
					// after a later move had taken the slot from it, then
					// drew a freeze there: a move the real mover cannot
					// plan (the map would say the slot is elsewhere).
					if r := apply(m.to, step(fsmpb.SlotsCommand_ACQUIRE, m.id, m.sl, m.sl, m.from)); !r.GetDone() {
						t.Fatalf("acquire of a finished move refused: %s", r.GetRefused())
					}
					if r := apply(m.from, step(fsmpb.SlotsCommand_RELEASE, m.id, m.sl, m.sl, m.to)); !r.GetDone() {
						t.Fatalf("release of a finished move refused: %s", r.GetRefused())
					}
				case m.phase == 0, m.phase == 1 && repeat:
					if r := apply(m.to, step(fsmpb.SlotsCommand_ACQUIRE, m.id, m.sl, m.sl, m.from)); !r.GetDone() {
						t.Fatalf("acquire refused: %s", r.GetRefused())
					}
					m.phase = 1
				case m.phase == 1:
					owner[m.sl] = m.to // the map, then the release
					if r := apply(m.from, step(fsmpb.SlotsCommand_RELEASE, m.id, m.sl, m.sl, m.to)); !r.GetDone() {
						t.Fatalf("release refused: %s", r.GetRefused())
					}
					m.phase = 2
				}
			}
			for _, tn := range tenants {
				s := shard.Of(tn)
				if groups["main"].Owns(s) && groups["g1"].Owns(s) {
					t.Fatalf("slot %d is owned by both groups", s)
				}
				// With no move of it under way, the slot is where the
				// map says: the model draws only what the mover can.
				busy := false
				for _, m := range moves {
					busy = busy || (m.sl == uint32(s) && m.phase < 2)
				}
				if g := owner[uint32(s)]; !busy && !groups[g].Owns(s) {
					t.Fatalf("slot %d: the map says %s, which does not own it, and no move of it is under way", s, g)
				}
			}
		}
		// Finish every move, then deliver what waits where it is owned.
		for _, m := range moves {
			if m.phase < 2 && !m.abort {
				apply(m.to, step(fsmpb.SlotsCommand_ACQUIRE, m.id, m.sl, m.sl, m.from))
				apply(m.from, step(fsmpb.SlotsCommand_RELEASE, m.id, m.sl, m.sl, m.to))
			} else if m.phase < 2 {
				apply(m.to, step(fsmpb.SlotsCommand_ABORT, m.id, m.sl, m.sl, m.from))
				apply(m.from, step(fsmpb.SlotsCommand_UNFREEZE, m.id, m.sl, m.sl, m.to))
			}
		}
		for _, c := range queue {
			if !deliver(c, "main") && !deliver(c, "g1") {
				t.Fatalf("tenant %s's slot is owned by no group once every move is over", c.GetTenant())
			}
		}
		var want, got uint64
		for _, c := range sent {
			want += c.GetAdmitted()
		}
		for _, g := range groups {
			g.eachLine(func(_ ledger.Key, u usage) { got += u.admitted })
		}
		if got != want {
			t.Fatalf("the groups' ledgers sum to %d admitted, the agent sent %d", got, want)
		}
	})
}

// TestGroupTakesNoStepBeforeItsStart: a group added to a region owns
// nothing from its start (its first leader's empty table). A step that
// reaches it before then, as an abort sent while it was coming up, is
// refused and makes no table: a table made by it would own every slot,
// take any tenant's usage, refuse every later acquire, and outlive the
// start, which does nothing once a table is there.
func TestGroupTakesNoStepBeforeItsStart(t *testing.T) {
	const (
		F = fsmpb.SlotsCommand_FREEZE
		A = fsmpb.SlotsCommand_ACQUIRE
		R = fsmpb.SlotsCommand_RELEASE
		X = fsmpb.SlotsCommand_ABORT
		U = fsmpb.SlotsCommand_UNFREEZE
		E = fsmpb.SlotsCommand_EMPTY
	)
	acme := uint32(shard.Of("acme"))
	s := New()
	for _, op := range []fsmpb.SlotsCommand_Op{X, A, F, R, U} {
		res := s.Apply(CmdSlots, step(op, 1, acme, acme, "g1")).(*fsmpb.SlotsResult)
		if res.GetDone() || !strings.Contains(res.GetRefused(), "has not started") {
			t.Fatalf("%v before the group's start: %+v, want a refusal saying it has not started", op, res)
		}
		if s.Group() != "" {
			t.Fatalf("%v before the group's start made a table of group %q", op, s.Group())
		}
	}
	if res := s.Apply(CmdSlots, step(E, 0, 0, 0, "g1")).(*fsmpb.SlotsResult); !res.GetDone() || s.OwnedSlots() != 0 {
		t.Fatalf("the start: %+v, owning %d slots, want none", res, s.OwnedSlots())
	}
	m := &machine{st: s}
	if res := s.Apply(CmdReports, usageCmd(hour0, "gw-1", 1, 1, "acme", 5, 0)).(*fsmpb.ReportsResult); len(res.GetMoved()) == 0 {
		t.Fatal("a group that owns no slot applied a tenant's usage")
	}
	if res := s.Apply(CmdSlots, step(A, 1, acme, acme, "g1")).(*fsmpb.SlotsResult); !res.GetDone() || s.OwnedSlots() != 1 {
		t.Fatalf("the acquire after the start: %+v, owning %d slots, want 1", res, s.OwnedSlots())
	}
	if res := s.Apply(CmdReports, usageCmd(hour0, "gw-1", 1, 1, "acme", 5, 0)).(*fsmpb.ReportsResult); len(res.GetMoved()) != 0 {
		t.Fatalf("usage of an acquired slot refused: %+v", res)
	}
	if a, _ := ledgerTotal(m, "acme"); a != 5 {
		t.Fatalf("ledger holds %d admitted, want 5", a)
	}
	if back := roundTrip(t, m).st; back.OwnedSlots() != 1 || back.Group() != "g1" {
		t.Fatalf("after a snapshot: %d slots of %q", back.OwnedSlots(), back.Group())
	}

	// The home group owns every slot with no table, and never starts
	// empty.
	h := homeState(t)
	if res := h.Apply(CmdSlots, step(E, 0, 0, 0, "main")).(*fsmpb.SlotsResult); res.GetDone() || h.OwnedSlots() != shard.Slots {
		t.Fatalf("the home group started empty: %+v, owning %d slots", res, h.OwnedSlots())
	}
	if res := h.Apply(CmdSlots, step(F, 1, 0, 99, "main")).(*fsmpb.SlotsResult); !res.GetDone() || h.OwnedSlots() != shard.Slots-100 {
		t.Fatalf("the home group's first freeze: %+v, owning %d slots", res, h.OwnedSlots())
	}
}

func TestShardMapCommands(t *testing.T) {
	s := New()
	mustMap := func(cmd *fsmpb.ShardMapCommand) *allotpb.ShardMap {
		t.Helper()
		res := s.Apply(CmdShardMap, cmd)
		if err, ok := res.(error); ok {
			t.Fatal(err)
		}
		return res.(*allotpb.ShardMap)
	}
	if err, _ := s.Apply(CmdShardMap, &fsmpb.ShardMapCommand{AddGroup: &allotpb.ShardGroup{Id: "g1"}}).(error); err == nil {
		t.Fatal("a first map without a home group was made")
	}
	pm := mustMap(&fsmpb.ShardMapCommand{Home: "main", Coordinators: []string{"a:1"}, AddGroup: &allotpb.ShardGroup{Id: "g1", Coordinators: []string{"b:1"}}})
	if pm.GetVersion() != 1 || len(pm.GetGroups()) != 2 {
		t.Fatalf("first map: %v", pm)
	}
	if again := mustMap(&fsmpb.ShardMapCommand{AddGroup: &allotpb.ShardGroup{Id: "g1", Coordinators: []string{"b:1"}}}); again.GetVersion() != 1 {
		t.Fatalf("adding a group again bumped the version to %d", again.GetVersion())
	}
	pm = mustMap(&fsmpb.ShardMapCommand{Plan: &allotpb.SlotMove{First: 0, Last: 99, From: "main", To: "g1", StartedUnixNano: 5}})
	if mv := pm.GetMoves()[0]; mv.GetId() != 1 || mv.GetPhase() != allotpb.SlotMove_PLANNED {
		t.Fatalf("planned move: %v", mv)
	}
	for _, bad := range []*allotpb.SlotMove{
		{First: 50, Last: 150, From: "main", To: "g1"},    // overlaps move 1
		{First: 200, Last: 300, From: "g1", To: "main"},   // g1 does not own them
		{First: 200, Last: 300, From: "main", To: "nope"}, // no such group
		{First: 200, Last: 300, From: "main", To: "main"}, // to itself
		{First: 300, Last: 200, From: "main", To: "g1"},   // not a range
	} {
		if err, _ := s.Apply(CmdShardMap, &fsmpb.ShardMapCommand{Plan: bad}).(error); err == nil {
			t.Errorf("move %v was planned", bad)
		}
	}
	// A pinned slot is left out of range moves, but moves alone.
	mustMap(&fsmpb.ShardMapCommand{Pin: &allotpb.PinSlotRequest{Slot: 500}})
	if err, _ := s.Apply(CmdShardMap, &fsmpb.ShardMapCommand{Plan: &allotpb.SlotMove{First: 400, Last: 600, From: "main", To: "g1"}}).(error); err == nil || !strings.Contains(err.Error(), "pinned") {
		t.Fatalf("a range move over a pinned slot: %v", err)
	}
	mustMap(&fsmpb.ShardMapCommand{Pin: &allotpb.PinSlotRequest{Slot: 500, Unpin: true}})
	mustMap(&fsmpb.ShardMapCommand{Phase: &allotpb.SlotMove{Id: 1, Phase: allotpb.SlotMove_ACQUIRED}})
	pm = mustMap(&fsmpb.ShardMapCommand{Phase: &allotpb.SlotMove{Id: 1, Phase: allotpb.SlotMove_DONE}})
	if s.ShardMap().Owner(0) != "g1" || s.ShardMap().Owner(100) != "main" {
		t.Fatalf("after the move: slot 0 in %s, slot 100 in %s", s.ShardMap().Owner(0), s.ShardMap().Owner(100))
	}
	if back := mustMap(&fsmpb.ShardMapCommand{Phase: &allotpb.SlotMove{Id: 1, Phase: allotpb.SlotMove_FROZEN}}); back.GetVersion() != pm.GetVersion() {
		t.Fatal("a move went back a phase")
	}
	back := roundTrip(t, &machine{st: s}).st
	if back.ShardMapVersion() != s.ShardMapVersion() || back.ShardMap().Owner(0) != "g1" {
		t.Fatal("the map did not survive a snapshot")
	}
}

// TestShardMapKeepsTheLastFinishedMoves: over many moves the map keeps
// every move under way and the newest shard.FinishedMovesKept finished
// ones, numbers new moves on from the newest, and so stays one size
// however many moves a region makes.
func TestShardMapKeepsTheLastFinishedMoves(t *testing.T) {
	s := homeState(t)
	phase := func(id uint64, p allotpb.SlotMove_Phase) any {
		return s.Apply(CmdShardMap, &fsmpb.ShardMapCommand{Phase: &allotpb.SlotMove{Id: id, Phase: p}})
	}
	plan := func(sl uint32, from, to string) uint64 {
		t.Helper()
		res := s.Apply(CmdShardMap, &fsmpb.ShardMapCommand{Plan: &allotpb.SlotMove{First: sl, Last: sl, From: from, To: to}})
		if err, ok := res.(error); ok {
			t.Fatal(err)
		}
		mv := res.(*allotpb.ShardMap).GetMoves()
		return mv[len(mv)-1].GetId()
	}
	stuck := plan(9000, "main", "g1") // under way throughout
	var sizes []int
	const moves = 3 * shard.FinishedMovesKept
	for i := range moves {
		from, to := "main", "g1"
		if i%2 == 1 {
			from, to = to, from
		}
		id := plan(7, from, to)
		if want := uint64(i) + 2; id != want {
			t.Fatalf("move %d got ID %d, want %d", i, id, want)
		}
		for _, p := range []allotpb.SlotMove_Phase{allotpb.SlotMove_FROZEN, allotpb.SlotMove_ACQUIRED, allotpb.SlotMove_DONE} {
			if err, ok := phase(id, p).(error); ok {
				t.Fatal(err)
			}
		}
		if i == moves/2 || i == moves-1 {
			sizes = append(sizes, proto.Size(s.ShardMap().Proto()))
		}
	}
	m := s.ShardMap()
	if len(m.Moves) != shard.FinishedMovesKept+1 {
		t.Fatalf("the map keeps %d moves, want %d finished and the one under way", len(m.Moves), shard.FinishedMovesKept)
	}
	if mv := shard.FindMove(m.Moves, stuck); mv == nil || !shard.Active(mv) {
		t.Fatalf("the move under way was forgotten: %v", mv)
	}
	if m.NextMoveID() != moves+2 || m.FinishedBelow() != stuck {
		t.Fatalf("next move ID %d, finished below %d; want %d and %d", m.NextMoveID(), m.FinishedBelow(), moves+2, stuck)
	}
	// Wider IDs take a byte more each; more moves take none.
	if sizes[1]-sizes[0] > len(m.Moves) {
		t.Fatalf("the map's wire size grew from %d to %d bytes over %d more moves", sizes[0], sizes[1], moves/2)
	}
	// A phase of a forgotten move (a deposed leader's mover) changes
	// nothing.
	v := s.ShardMapVersion()
	if err, ok := phase(2, allotpb.SlotMove_DONE).(error); !ok || !errors.Is(err, ErrShardMap) || s.ShardMapVersion() != v {
		t.Fatalf("a phase of a forgotten move: %v, version %d → %d", err, v, s.ShardMapVersion())
	}
	back := roundTrip(t, &machine{st: s}).st.ShardMap()
	if len(back.Moves) != len(m.Moves) || back.NextMoveID() != m.NextMoveID() {
		t.Fatalf("after a snapshot: %d moves, next ID %d", len(back.Moves), back.NextMoveID())
	}
}

// TestSlotTableForgetsFinishedMoves: a group forgets its steps of the
// moves the home group's mover says are finished (finished_below), so its
// table stays small over many moves, and refuses a step of one sent
// again (a deposed leader's), changing nothing, before and after a
// snapshot.
func TestSlotTableForgetsFinishedMoves(t *testing.T) {
	const (
		F = fsmpb.SlotsCommand_FREEZE
		A = fsmpb.SlotsCommand_ACQUIRE
		R = fsmpb.SlotsCommand_RELEASE
		X = fsmpb.SlotsCommand_ABORT
		E = fsmpb.SlotsCommand_EMPTY
	)
	s := New()
	do := func(op fsmpb.SlotsCommand_Op, id, finished uint64) *fsmpb.SlotsResult {
		c := step(op, id, 7, 7, "g1")
		c.FinishedBelow = finished
		return s.Apply(CmdSlots, c).(*fsmpb.SlotsResult)
	}
	do(E, 0, 0)
	// Slot 7 comes to g1 by the odd moves and leaves by the even ones;
	// each move finishes before the next starts, and an abort of another
	// slot's move now and then.
	var id uint64
	for range 500 {
		id++
		if r := do(A, id, id); !r.GetDone() {
			t.Fatalf("acquire of move %d: %s", id, r.GetRefused())
		}
		id++
		if r := do(F, id, id); !r.GetDone() {
			t.Fatalf("freeze of move %d: %s", id, r.GetRefused())
		}
		if r := do(R, id, id); !r.GetDone() {
			t.Fatalf("release of move %d: %s", id, r.GetRefused())
		}
		id++
		if r := do(X, id, id); !r.GetDone() {
			t.Fatalf("abort of move %d: %s", id, r.GetRefused())
		}
	}
	if n := s.RememberedMoves(); n > 1 {
		t.Fatalf("after %d moves the table remembers %d of them, want the one under way at most", id, n)
	}
	check := func(s *State) {
		t.Helper()
		// Move 1 acquired slot 7, move 3 was aborted: sent again, each
		// would now be taken as new, giving g1 a slot it gave away.
		for _, c := range []*fsmpb.SlotsCommand{step(A, 1, 7, 7, "g1"), step(A, 3, 7, 7, "g1"), step(X, 1, 7, 7, "g1")} {
			if r := s.Apply(CmdSlots, c).(*fsmpb.SlotsResult); r.GetDone() || !strings.Contains(r.GetRefused(), "forgotten") || s.OwnedSlots() != 0 {
				t.Fatalf("%v of finished move %d: %+v, owning %d slots", c.GetOp(), c.GetMoveId(), r, s.OwnedSlots())
			}
		}
		// The mover's next move still goes.
		next := id + 1
		c := step(A, next, 7, 7, "g1")
		c.FinishedBelow = next
		if r := s.Apply(CmdSlots, c).(*fsmpb.SlotsResult); !r.GetDone() || s.OwnedSlots() != 1 {
			t.Fatalf("the next move's acquire: %+v", r)
		}
	}
	back := roundTrip(t, &machine{st: s}).st
	check(s)
	check(back)
}
