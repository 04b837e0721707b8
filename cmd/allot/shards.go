package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/allot-io/allot/internal/shard"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc"
)

func shardsCommand() *Command {
	return &Command{
		Name:  "shards",
		Short: "split a region into shard groups and move slots between them",
		Long: `
Administers a region's shard groups (docs/coordinator.md#shard-groups):
independent coordinator clusters, each owning some of the region's 16,384
slots. A tenant's slot is FNV-1a 64 of its name modulo 16,384; all of a
tenant's keys and ledger lines live in the group owning its slot.`,
		Notes: `
--coordinator names the home group (the one started without --shard-home).
add-group and move need the admin token when the cluster has one.`,
		Commands: []*Command{
			{
				Name: "status", Usage: "[--format table|json] [flags]",
				Short: "the map: groups, their slots, members and load, moves",
				Long:  shardsStatusAbout, Flags: shardsStatusFlags,
			},
			{
				Name: "add-group", Args: "ID", Usage: "ID --members ADDRS [flags]",
				Short: "record a group (started with --group ID --shard-home ADDRS) in the map, owning no slot yet",
				Long:  shardsAddGroupAbout, Flags: shardsAddGroupFlags,
			},
			{
				Name: "move", Args: "SLOTS --to GROUP", Usage: "SLOTS --to GROUP [--wait] [flags] | --tenant T --to GROUP",
				Short: "move slots N or N-M (or --tenant T's) to GROUP, under load: exactly once, no unit lost or counted twice",
				Long:  shardsMoveAbout, Flags: shardsMoveFlags,
			},
			{
				Name: "pin", Args: "SLOT | --tenant T", Usage: "SLOT | --tenant T [--unpin] [flags]",
				Short: "leave a slot out of range moves (a large tenant placed in a group of its own); --unpin undoes it",
				Long:  shardsPinAbout, Flags: shardsPinFlags,
			},
			{
				Name: "rebalance", Usage: "[--sample 10s] [--tolerance 0.1] [--max-moves 8] [--apply] [flags]",
				Short: "measure each group's load per slot and propose moves that even it out; --apply carries them out",
				Long:  shardsRebalanceAbout, Flags: shardsRebalanceFlags,
			},
		},
	}
}

// callShards dials the cluster cf names and makes one ShardService call.
func callShards[T any](ctx context.Context, cf *clientFlags, call func(context.Context, allotpb.ShardServiceClient) (T, error)) (T, error) {
	var out T
	cl, err := cf.connect()
	if err != nil {
		return out, err
	}
	defer cl.Close()
	err = cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		out, err = call(ctx, allotpb.NewShardServiceClient(cc))
		return err
	})
	return out, err
}

// readShardMap reads the home group's map and checks it.
func readShardMap(ctx context.Context, cf *clientFlags, cl *coordinatorClient) (*shard.Map, *allotpb.ShardMap, error) {
	pm, err := shardMapOf(ctx, cf, cl)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the shard map: %w", err)
	}
	m, err := shard.FromProto(pm)
	if err != nil {
		return nil, nil, fmt.Errorf("the home group's shard map: %w", err)
	}
	return m, pm, nil
}

// slotsArg reads the slots a command names: SLOTS (N or N-M) or --tenant's.
func slotsArg(cmd, tenant string, args []string) (first, last shard.Slot, err error) {
	switch {
	case tenant != "" && len(args) == 0:
		first = shard.Of(tenant)
		return first, first, nil
	case tenant == "":
		s, err := exactlyOne(cmd, "slot range (N or N-M)", args)
		if err != nil {
			return 0, 0, err
		}
		if first, last, err = shard.ParseRange(s); err != nil {
			return 0, 0, usagef(cmd, "%v", err)
		}
		return first, last, nil
	}
	return 0, 0, usagef(cmd, "give SLOTS or --tenant, not both")
}

// shardMapOf asks the home group for its map.
func shardMapOf(ctx context.Context, cf *clientFlags, cl *coordinatorClient) (*allotpb.ShardMap, error) {
	var pm *allotpb.ShardMap
	err := cf.once(ctx, cl, func(ctx context.Context, cc *grpc.ClientConn) error {
		var err error
		pm, err = allotpb.NewShardServiceClient(cc).GetShardMap(ctx, &allotpb.GetShardMapRequest{})
		return err
	})
	return pm, err
}

// groupStatus is one group's line of `allot shards status`.
type groupStatus struct {
	ID      string   `json:"id"`
	Slots   int      `json:"slots"`
	Members []string `json:"members"`
	Leader  string   `json:"leader,omitempty"`
	Agents  uint32   `json:"agents"`
	Keys    uint64   `json:"active_keys"`
	Lines   uint64   `json:"ledger_lines"`
	Error   string   `json:"error,omitempty"`
}

type shardsStatus struct {
	Version uint64               `json:"version"`
	Home    string               `json:"home"`
	Global  string               `json:"global"`
	Groups  []groupStatus        `json:"groups"`
	Ranges  []*allotpb.SlotRange `json:"ranges"`
	Pinned  []uint32             `json:"pinned,omitempty"`
	Moves   []*allotpb.SlotMove  `json:"moves"`
}

const shardsStatusAbout = `
Prints the region's shard map as its home group holds it: every group with
the slots it owns, its members and its leader's load (agents reporting,
active keys, ledger lines held), and every move with its phase. A region
never split is one group owning every slot, map version 0.`

func shardsStatusFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var format string
	f.StringVar(&format, "format", "table", "output format: table or json")
	return func(ctx context.Context, e *env, args []string) error {
		if format != "table" && format != "json" {
			return usagef(cmd, "--format %q: want table or json", format)
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		m, pm, err := readShardMap(ctx, cf, cl)
		if err != nil {
			return err
		}
		out := shardsStatus{Version: m.Version, Home: m.Home, Global: m.Global, Ranges: m.Ranges(), Pinned: pm.GetPinned(), Moves: pm.GetMoves()}
		counts := m.Count()
		for _, g := range m.GroupIDs() {
			gs := groupStatus{ID: g, Slots: counts[g], Members: m.Groups[g]}
			if err := groupLoad(ctx, cf, &gs); err != nil {
				gs.Error = err.Error()
			}
			out.Groups = append(out.Groups, gs)
		}
		if format == "json" {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		return writeShardsTable(e.stdout, &out)
	}
}

// groupLoad fills a group's leader and load from its members' status.
func groupLoad(ctx context.Context, cf *clientFlags, gs *groupStatus) error {
	if len(gs.Members) == 0 {
		return errors.New("no member known")
	}
	gf := *cf
	gf.coordinators = strings.Join(gs.Members, ",")
	cl, err := gf.dial()
	if err != nil {
		return err
	}
	defer cl.Close()
	st, err := memberStatusOf(ctx, &gf, cl)
	if err != nil {
		return err
	}
	gs.Leader = st.GetLeaderId()
	if st.GetLeaderGrpcAddress() != "" {
		lf := gf
		lf.coordinators = st.GetLeaderGrpcAddress()
		if lc, err := lf.dial(); err == nil {
			if ls, err := memberStatusOf(ctx, &lf, lc); err == nil {
				st = ls
			}
			lc.Close()
		}
	}
	gs.Agents, gs.Keys, gs.Lines = st.GetAgents(), st.GetActiveKeys(), st.GetLedger().GetLines()
	return nil
}

func writeShardsTable(w io.Writer, s *shardsStatus) error {
	fmt.Fprintf(w, "shard map version %d, home group %s, global rules in %s, %d slots\n\n", s.Version, s.Home, s.Global, shard.Slots)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tSLOTS\tLEADER\tAGENTS\tACTIVE KEYS\tLEDGER LINES\tMEMBERS")
	for _, g := range s.Groups {
		leader := g.Leader
		if g.Error != "" {
			leader = "unreachable: " + g.Error
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%s\n", g.ID, g.Slots, leader, g.Agents, g.Keys, g.Lines, strings.Join(g.Members, ","))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(s.Pinned) > 0 {
		fmt.Fprintf(w, "\npinned slots (left out of range moves): %v\n", s.Pinned)
	}
	if len(s.Moves) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "MOVE\tSLOTS\tFROM\tTO\tPHASE\tSTARTED\tERROR")
	for _, mv := range s.Moves {
		fmt.Fprintf(tw, "%d\t%d-%d\t%s\t%s\t%s\t%s\t%s\n", mv.GetId(), mv.GetFirst(), mv.GetLast(), mv.GetFrom(), mv.GetTo(),
			strings.ToLower(mv.GetPhase().String()), time.Unix(0, mv.GetStartedUnixNano()).UTC().Format(time.RFC3339), mv.GetError())
	}
	return tw.Flush()
}

const shardsAddGroupAbout = `
Records group ID in the region's shard map with its members' gRPC
addresses. Start the group first: its members run 'allot coordinator
--group ID --shard-home HOME-ADDRS'; it starts owning no slot, takes its
rules from the home group, and refuses rule writes. Move slots to it with
'allot shards move'.`

func shardsAddGroupFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var members string
	f.StringVar(&members, "members", "", "the group's members' gRPC addresses, comma-separated")
	return func(ctx context.Context, e *env, args []string) error {
		id, err := exactlyOne(cmd, "group ID", args)
		if err != nil {
			return err
		}
		if err := shard.ValidGroupID(id); err != nil {
			return usagef(cmd, "%v", err)
		}
		addrs := splitList(members)
		if len(addrs) == 0 {
			return usagef(cmd, "--members: a group needs at least one member's gRPC address")
		}
		pm, err := callShards(ctx, cf, func(ctx context.Context, sc allotpb.ShardServiceClient) (*allotpb.ShardMap, error) {
			return sc.AddGroup(ctx, &allotpb.AddGroupRequest{Id: id, Coordinators: addrs})
		})
		if err != nil {
			return fmt.Errorf("adding group %s: %w", id, err)
		}
		fmt.Fprintf(e.stdout, "group %s added (shard map version %d); move slots to it with: allot shards move SLOTS --to %s\n", id, pm.GetVersion(), id)
		return nil
	}
}

const shardsMoveAbout = `
Moves slots N or N-M (inclusive), or the slot of --tenant T, to GROUP,
while agents report. The home group's leader carries each move out: freeze
at the source (it takes no more usage for them; agents keep it and retry),
acquire at the target (the commit point), update the map (agents follow it
within a report), release at the source. A crash of any participant
resumes or aborts the move; no unit is lost or counted twice. --wait waits
until every move is over.

A move takes one owner's slots, so a range held by several groups is moved
owner by owner: one move per run of another group's slots, each exactly
once on its own. Slots GROUP owns already are skipped, and said so. A
pinned slot of another group in a range refuses the whole range (move it
alone, or unpin it); nothing of a refused range is moved.`

func shardsMoveFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var to, tenant string
	var wait bool
	f.StringVar(&to, "to", "", "the group to move the slots to")
	f.StringVar(&tenant, "tenant", "", "move this tenant's slot (instead of SLOTS)")
	f.BoolVar(&wait, "wait", false, "wait until every move is done or aborted")
	return func(ctx context.Context, e *env, args []string) error {
		first, last, err := slotsArg(cmd, tenant, args)
		if err != nil {
			return err
		}
		if to == "" {
			return usagef(cmd, "--to: name the group to move the slots to")
		}
		cl, err := cf.connect()
		if err != nil {
			return err
		}
		defer cl.Close()
		whole := shard.Run{First: first, Last: last}
		m, _, err := readShardMap(ctx, cf, cl)
		if err != nil {
			return err
		}
		moves, skipped, err := m.SplitMove(first, last, to)
		if err != nil {
			return &refusedError{err: fmt.Errorf("moving slots %s to %s: %w", whole, to, err)}
		}
		if len(moves) == 0 {
			fmt.Fprintf(e.stdout, "%s in %s already: nothing to move\n", slotsAre([]shard.Run{whole}), to)
			return nil
		}
		if len(skipped) > 0 {
			fmt.Fprintf(e.stdout, "skipping %s, in %s already\n", slotsNamed(skipped), to)
		}
		// Each move is planned against the map the home leader holds then,
		// which refuses one that a change since this read made wrong.
		var planned []*allotpb.SlotMove
		for _, want := range moves {
			resp, err := callShards(ctx, cf, func(ctx context.Context, sc allotpb.ShardServiceClient) (*allotpb.MoveSlotsResponse, error) {
				return sc.MoveSlots(ctx, &allotpb.MoveSlotsRequest{First: want.GetFirst(), Last: want.GetLast(), To: to})
			})
			if err != nil {
				err = fmt.Errorf("moving slots %d-%d to %s: %w", want.GetFirst(), want.GetLast(), to, err)
				if len(planned) > 0 {
					err = fmt.Errorf("%w (the moves planned before it go on: allot shards status)", err)
				}
				return err
			}
			mv := resp.GetMove()
			planned = append(planned, mv)
			fmt.Fprintf(e.stdout, "move %d: slots %d-%d from %s to %s, %s\n", mv.GetId(), mv.GetFirst(), mv.GetLast(), mv.GetFrom(), mv.GetTo(), strings.ToLower(mv.GetPhase().String()))
		}
		if !wait {
			return nil
		}
		return waitMoves(ctx, e, cf, cl, planned)
	}
}

// slotsNamed is "slot N" or "slots N-M, K".
func slotsNamed(runs []shard.Run) string {
	if len(runs) == 1 && runs[0].First == runs[0].Last {
		return "slot " + runs[0].String()
	}
	return "slots " + shard.RunList(runs)
}

// slotsAre is "slot N is" or "slots N-M are".
func slotsAre(runs []shard.Run) string {
	if len(runs) == 1 && runs[0].First == runs[0].Last {
		return slotsNamed(runs) + " is"
	}
	return slotsNamed(runs) + " are"
}

// waitMoves waits until every move planned is over, printing how each
// ended as it does; it fails if any was aborted.
func waitMoves(ctx context.Context, e *env, cf *clientFlags, cl *coordinatorClient, planned []*allotpb.SlotMove) error {
	var aborted []error
	for len(planned) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		pm, err := shardMapOf(ctx, cf, cl)
		if err != nil {
			continue // a leader change: ask again
		}
		m, err := shard.FromProto(pm)
		if err != nil {
			return err
		}
		var left []*allotpb.SlotMove
		for _, mv := range planned {
			cur := shard.FindMove(m.Moves, mv.GetId())
			switch {
			case cur == nil && mv.GetId() >= m.NextMoveID():
				left = append(left, mv) // a member that has not applied the move yet
				continue
			case cur == nil:
				if err := forgottenMove(e, m, mv); err != nil {
					aborted = append(aborted, err)
				}
				continue
			case shard.Active(cur):
				left = append(left, mv)
				continue
			}
			fmt.Fprintf(e.stdout, "move %d: %s", cur.GetId(), strings.ToLower(cur.GetPhase().String()))
			if cur.GetError() != "" {
				fmt.Fprintf(e.stdout, " (%s)", cur.GetError())
			}
			fmt.Fprintln(e.stdout)
			if cur.GetPhase() != allotpb.SlotMove_DONE {
				aborted = append(aborted, fmt.Errorf("move %d was aborted: %s", cur.GetId(), cur.GetError()))
			}
		}
		planned = left
	}
	if len(aborted) > 0 {
		return &refusedError{err: errors.Join(aborted...)}
	}
	return nil
}

// forgottenMove reports a move that finished and left the map (it keeps
// the last shard.FinishedMovesKept finished moves) before --wait saw it
// end: done if the map routes its slots to its target.
func forgottenMove(e *env, m *shard.Map, mv *allotpb.SlotMove) error {
	for s := mv.GetFirst(); s <= mv.GetLast(); s++ {
		if g := m.Owner(shard.Slot(s)); g != mv.GetTo() {
			return &refusedError{err: fmt.Errorf("move %d finished and the map no longer lists it (it keeps the last %d finished moves); slot %d is routed to %s, not %s", mv.GetId(), shard.FinishedMovesKept, s, g, mv.GetTo())}
		}
	}
	fmt.Fprintf(e.stdout, "move %d: done (the map routes slots %d-%d to %s; it no longer lists the move)\n", mv.GetId(), mv.GetFirst(), mv.GetLast(), mv.GetTo())
	return nil
}

const shardsPinAbout = `
Pins slot SLOT, or the slot of --tenant T: a move of a range that holds
it is refused, so that a large tenant placed in a group of its own (allot
shards move --tenant T --to GROUP) stays there while other slots are
moved. Moving the pinned slot alone is still allowed. A tenant is placed
by its slot, with the few other tenants that share it; one tenant's keys
cannot be split between groups. --unpin undoes a pin.`

func shardsPinFlags(f *flags) runFunc {
	cmd := f.cmd
	cf := f.client()
	var tenant string
	var unpin bool
	f.StringVar(&tenant, "tenant", "", "pin this tenant's slot (instead of SLOT)")
	f.BoolVar(&unpin, "unpin", false, "unpin the slot")
	return func(ctx context.Context, e *env, args []string) error {
		sl, last, err := slotsArg(cmd, tenant, args)
		if err != nil {
			return err
		}
		if sl != last {
			return usagef(cmd, "pin one slot at a time, not %d-%d", sl, last)
		}
		pm, err := callShards(ctx, cf, func(ctx context.Context, sc allotpb.ShardServiceClient) (*allotpb.ShardMap, error) {
			return sc.PinSlot(ctx, &allotpb.PinSlotRequest{Slot: uint32(sl), Unpin: unpin})
		})
		if err != nil {
			return fmt.Errorf("pinning slot %d: %w", sl, err)
		}
		what := "pinned"
		if unpin {
			what = "unpinned"
		}
		fmt.Fprintf(e.stdout, "slot %d %s (shard map version %d)\n", sl, what, pm.GetVersion())
		return nil
	}
}
