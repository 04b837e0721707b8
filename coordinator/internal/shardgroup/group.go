package shardgroup

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/slotmove"
	"github.com/allot-io/allot/coordinator/internal/state"
	"github.com/allot-io/allot/internal/shard"
	"github.com/allot-io/allot/internal/timeutil"
	allotpb "github.com/allot-io/allot/proto"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Member is what a shard group needs of the member it runs on: its
// replica, its proposals, whether and where it leads, and its
// connections to other members.
type Member interface {
	// Read runs fn on this member's replica of the state.
	Read(fn func(*state.State))
	// Apply proposes a command on this member, which must lead, waits for
	// it to be applied, and returns what the state answered.
	Apply(t state.Command, m proto.Message, timeout time.Duration) (any, error)
	// Leading reports whether this member leads and is ready to serve.
	Leading() bool
	// OnLeader runs local on the group's leader: here when this member
	// leads, otherwise forward, given the leader's address and a context
	// carrying the caller's credentials. A local that fails with
	// ErrNotServing, or with the member's own not-the-leader error, is
	// forwarded too.
	OnLeader(ctx context.Context, local func() (any, error), forward func(ctx context.Context, addr string) (any, error)) (any, error)
	// Answer counts an administrator's call to method by its result and
	// returns its error as the caller is answered.
	Answer(method string, err error) error
	// Conn is a connection to a member of this group or another; AsMember
	// makes ctx carry this member's own credentials on it.
	Conn(addr string) grpc.ClientConnInterface
	AsMember(ctx context.Context) context.Context
}

// ErrNotServing is what a read only the leader answers fails with on a
// member that leads Raft but does not serve yet: OnLeader forwards it.
var ErrNotServing = errors.New("shard group: this member does not serve as its group's leader")

// Metrics are a shard group's gauges, registered by the member.
type Metrics struct {
	// SlotsOwned is the slots this group owns, on its leader.
	SlotsOwned prometheus.Gauge
	// MovesActive and MoveOldest are the moves under way and the age of
	// the oldest, in seconds, on the home group's leader.
	MovesActive, MoveOldest prometheus.Gauge
}

// Config is what a shard group runs with.
type Config struct {
	// ID is this cluster's group; Home the home group's members' gRPC
	// addresses, empty on the home group itself.
	ID   string
	Home []string
	// NodeID is this member's.
	NodeID  string
	Member  Member
	Clock   timeutil.TimeSource
	Log     hclog.Logger
	Metrics Metrics
	// Acquired is told of the slots a move gave this group, when they
	// were taken: its leader's allocator learns what their agents hold.
	Acquired func(first, last shard.Slot, now int64)
}

// Group is this cluster's part in its region's shard groups: the map as
// it knows it, the steps of moves committed in its log, and, on a split
// region's leader, the load of each slot.
type Group struct {
	cfg Config
	m   Member
	// kick wakes the home leader's mover when a move is planned.
	kick chan struct{}
	// homeMapVersion is, on a group that is not home, the home group's
	// map version as last read (with its rules), stamped on every answer.
	homeMapVersion atomic.Uint64
	// split is set on a leader of a region split into shard groups; load
	// counts the key entries reported per slot.
	split atomic.Bool
	load  slotLoad
}

// New returns this cluster's group; ID "" is the default group's.
func New(cfg Config) *Group {
	if cfg.ID == "" {
		cfg.ID = shard.DefaultGroup
	}
	return &Group{cfg: cfg, m: cfg.Member, kick: make(chan struct{}, 1)}
}

func (g *Group) now() time.Time { return g.cfg.Clock.Now() }

// ID is this cluster's shard group.
func (g *Group) ID() string { return g.cfg.ID }

// IsHome reports whether this cluster is its region's home group.
func (g *Group) IsHome() bool { return len(g.cfg.Home) == 0 }

// NotHome refuses a call only the home group answers.
func (g *Group) NotHome(what string) error {
	return status.Errorf(codes.FailedPrecondition, "%s: shard group %q is not its region's home group; call the home group (%v)", what, g.ID(), g.cfg.Home)
}

// HomeMapVersion is, on a group that is not home, the home group's map
// version as last read: answers carry it, so that agents refresh their
// map from any group's.
func (g *Group) HomeMapVersion() uint64 { return g.homeMapVersion.Load() }

// SlotsMoved is the refusal of a report whose usage falls in slots this
// group does not own: nothing of it was applied.
func (g *Group) SlotsMoved(slots []uint32) error {
	var v uint64
	g.m.Read(func(st *state.State) { v = st.ShardMapVersion() })
	v = max(v, g.homeMapVersion.Load())
	shown := slots
	if len(shown) > 8 {
		shown = shown[:8]
	}
	st := status.New(codes.FailedPrecondition, fmt.Sprintf("shard group %q does not own slots %v (of %d) of this report's usage: nothing of it was applied; route it by a newer shard map", g.ID(), shown, len(slots)))
	if d, err := st.WithDetails(&allotpb.SlotsMoved{Group: g.ID(), Slots: slots, MapVersion: v}); err == nil {
		st = d
	}
	return st.Err()
}

// memberAddrs are the gRPC addresses of this group's members, as the
// replicated state records them.
func (g *Group) memberAddrs() []string {
	var addrs []string
	g.m.Read(func(st *state.State) {
		for _, mb := range st.Members() {
			if a := mb.GetGrpcAddress(); a != "" {
				addrs = append(addrs, a)
			}
		}
	})
	slices.Sort(addrs)
	return addrs
}

// Map is the region's map as this (home) member holds it: the region as
// one group owning every slot, version 0, until a group is added.
func (g *Group) Map() *shard.Map {
	var m *shard.Map
	g.m.Read(func(st *state.State) {
		if sm := st.ShardMap(); sm != nil {
			m = sm.Clone()
		}
	})
	if m == nil {
		m = shard.Single(g.ID(), g.memberAddrs())
		m.Version = 0
	}
	return m
}

// HomeMap is the region's map: this group's own when it is home,
// otherwise the home group's.
func (g *Group) HomeMap(ctx context.Context, known uint64) (*allotpb.ShardMap, error) {
	if g.IsHome() {
		return g.Map().Proto(), nil
	}
	var lastErr error = errors.New("no home group address")
	for _, a := range g.cfg.Home {
		pm, err := allotpb.NewShardServiceClient(g.m.Conn(a)).GetShardMap(g.m.AsMember(ctx), &allotpb.GetShardMapRequest{KnownVersion: known})
		if err == nil {
			return pm, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// groupStep commits one step of a move in this group's log.
func (g *Group) groupStep(req *allotpb.GroupSlotsRequest) (*allotpb.GroupSlotsResponse, error) {
	op, ok := slotmove.Op(req.GetStep())
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "step: unknown step %v", req.GetStep())
	}
	if !g.IsHome() {
		var err error
		g.m.Read(func(st *state.State) { err = slotmove.NotStarted(st, g.ID()) })
		if err != nil {
			return nil, err
		}
	}
	res, err := g.m.Apply(state.CmdSlots, &fsmpb.SlotsCommand{
		Op: op, MoveId: req.GetMoveId(), First: req.GetFirst(), Last: req.GetLast(), Peer: req.GetPeer(),
		Group: g.ID(), ProposedUnixNano: g.now().UnixNano(), FinishedBelow: req.GetFinishedBelow(),
	}, moveStepTimeout)
	if err != nil {
		return nil, err
	}
	r := res.(*fsmpb.SlotsResult)
	if r.GetDone() && op == fsmpb.SlotsCommand_ACQUIRE {
		g.cfg.Acquired(shard.Slot(req.GetFirst()), shard.Slot(req.GetLast()), g.now().UnixNano())
	}
	if r.GetDone() {
		g.cfg.Log.Info("shard step committed", "step", req.GetStep().String(), "move", req.GetMoveId(), "slots", fmt.Sprintf("%d-%d", req.GetFirst(), req.GetLast()), "owned", r.GetOwned())
	}
	return &allotpb.GroupSlotsResponse{Done: r.GetDone(), Refused: r.GetRefused(), Owned: r.GetOwned()}, nil
}

// applyShardMap commits a change of the home group's map.
func (g *Group) applyShardMap(cmd *fsmpb.ShardMapCommand) (*allotpb.ShardMap, error) {
	cmd.Home = g.ID()
	cmd.Coordinators = g.memberAddrs()
	res, err := g.m.Apply(state.CmdShardMap, cmd, 10*time.Second)
	if errors.Is(err, state.ErrShardMap) {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	if err != nil {
		return nil, err
	}
	return res.(*allotpb.ShardMap), nil
}

// Start is what a leader of a group that is not home does first: a group
// added to a region owns no slot until a move gives it some.
func (g *Group) Start() error {
	if g.IsHome() {
		return nil
	}
	named := ""
	g.m.Read(func(st *state.State) { named = st.Group() })
	if named != "" {
		return nil
	}
	_, err := g.m.Apply(state.CmdSlots, &fsmpb.SlotsCommand{Op: fsmpb.SlotsCommand_EMPTY, Group: g.ID(), ProposedUnixNano: g.now().UnixNano()}, 10*time.Second)
	return err
}

// FollowHome is a non-home group leader's loop: every interval it reads
// the home group's map version, and mirror takes what the home group
// decides for every group (its rules, with their version, so that agents
// see one rule set and one version whichever group answers).
func (g *Group) FollowHome(ctx context.Context, every time.Duration, mirror func(context.Context) error) {
	t := g.cfg.Clock.NewTicker(every)
	defer t.Stop()
	defer g.cfg.Metrics.SlotsOwned.Set(0)
	g.split.Store(true)
	for {
		var owned int
		g.m.Read(func(st *state.State) { owned = st.OwnedSlots() })
		g.cfg.Metrics.SlotsOwned.Set(float64(owned))
		if err := g.followOnce(ctx, mirror); err != nil {
			g.cfg.Log.Warn("could not mirror the home group's rules; retrying", "home", g.cfg.Home, "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

func (g *Group) followOnce(ctx context.Context, mirror func(context.Context) error) error {
	if pm, err := g.HomeMap(ctx, g.homeMapVersion.Load()); err == nil && pm.GetVersion() > g.homeMapVersion.Load() {
		// Agents refresh their map from any group's answer.
		g.homeMapVersion.Store(pm.GetVersion())
	}
	return mirror(ctx)
}

// slotLoad counts, on a split region's leader, the key entries reported
// per slot: the load `allot shards rebalance` divides. Counting costs a
// hash of each entry's tenant, so a region never split does not count.
type slotLoad struct {
	since   atomic.Int64
	entries [shard.Slots]atomic.Uint64
}

// ResetLoad starts counting the slots' load afresh, at now: a new
// leader's count.
func (g *Group) ResetLoad(now int64) {
	for i := range g.load.entries {
		g.load.entries[i].Store(0)
	}
	g.load.since.Store(now)
}

// CountLoad adds a report's entries to the slots they fall in.
func (g *Group) CountLoad(req *allotpb.ReportRequest) {
	if !g.split.Load() {
		return
	}
	for _, d := range req.GetDemand() {
		g.load.entries[shard.Of(d.GetTenant())].Add(1)
	}
	for _, u := range req.GetUsage().GetCounts() {
		g.load.entries[shard.Of(u.GetTenant())].Add(1)
	}
}
