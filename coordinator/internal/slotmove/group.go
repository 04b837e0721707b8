package slotmove

import (
	"github.com/allot-io/allot/coordinator/internal/fsm/fsmpb"
	"github.com/allot-io/allot/coordinator/internal/state"
	allotpb "github.com/allot-io/allot/proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ops are the log's ops for the wire's steps.
var ops = map[allotpb.GroupSlotsRequest_Step]fsmpb.SlotsCommand_Op{
	allotpb.GroupSlotsRequest_FREEZE:   fsmpb.SlotsCommand_FREEZE,
	allotpb.GroupSlotsRequest_ACQUIRE:  fsmpb.SlotsCommand_ACQUIRE,
	allotpb.GroupSlotsRequest_RELEASE:  fsmpb.SlotsCommand_RELEASE,
	allotpb.GroupSlotsRequest_ABORT:    fsmpb.SlotsCommand_ABORT,
	allotpb.GroupSlotsRequest_UNFREEZE: fsmpb.SlotsCommand_UNFREEZE,
}

// Op is the log's op for a step on the wire, and false for a step it does
// not know.
func Op(s allotpb.GroupSlotsRequest_Step) (fsmpb.SlotsCommand_Op, bool) {
	op, ok := ops[s]
	return op, ok
}

// NotStarted refuses a step at a group other than home whose leader has
// not committed its empty slot table yet. The state refuses the step as
// well; UNAVAILABLE tells the mover that the group is coming up, so that
// it takes the step again rather than abort the move.
func NotStarted(st *state.State, group string) error {
	if st.Group() != "" {
		return nil
	}
	return status.Errorf(codes.Unavailable, "shard group %q has not started: its leader has not committed its empty slot table yet; retry the step", group)
}
