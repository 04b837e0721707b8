package coordinator

import (
	"github.com/allot-io/allot/coordinator/internal/fsm/state"
	"sync/atomic"

	"github.com/allot-io/allot/coordinator/allocator"
	allotpb "github.com/allot-io/allot/proto"
)

// intake bounds the reports the leader takes at once. A report taken
// holds a goroutine, its decoded request and its folded entries until it
// is answered; a leader taking every report that arrived, however many
// were under way, queued them without bound when it fell behind, each
// answered long after its caller had left, until it ran out of memory
// (issue 41: 6,900 goroutines and 2.8 GB at 100 gateways). Past the
// bound a report is answered at once without being taken: shed.
//
// Early reports are shed first, from half the bound, and while allocation
// rounds overrun their interval: they ask for more sooner, which a leader
// behind on its rounds cannot give anyway. A regular report is shed only
// at the bound itself, and never, below it, a node's first report of the
// term: a new leader learns what the fleet holds from those.
type intake struct {
	max      int64 // 0: unbounded
	inFlight atomic.Int64
}

func newIntake(bound int) *intake {
	return &intake{max: int64(max(bound, 0))}
}

// take reports whether a report may be taken, and if so counts it in
// flight until done. urgent says it is an early report, known that its
// node has reported to this leader, behind that the last round overran.
func (in *intake) take(urgent, known, behind bool) bool {
	n := in.inFlight.Add(1)
	if in.max == 0 {
		return true
	}
	shed := n > in.max
	if known && urgent && (behind || n > in.max/2) {
		shed = true
	}
	if shed {
		in.inFlight.Add(-1)
	}
	return !shed
}

func (in *intake) done() { in.inFlight.Add(-1) }

// shedAnswer is the answer to a report the leader did not take: nothing
// of it applied, no lease changed, and the leases it holds renewed for a
// lease period when this leader has heard from the node in its term (it
// then counts them held until then; see Allocator.Shed). The agent keeps
// enforcing them and asks for nothing early for an interval; its usage
// goes again in its next report.
func (c *Coordinator) shedAnswer(v *state.View, req *allotpb.ReportRequest, set allocator.Settings) *allotpb.ReportResponse {
	now := c.now()
	resp := &allotpb.ReportResponse{
		Protocol:            allotpb.ProtocolVersion_PROTOCOL_VERSION_1,
		Shed:                true,
		RetryAfterNano:      int64(set.ReportInterval),
		ReportIntervalNano:  int64(set.ReportInterval),
		LeaseTtlNano:        int64(set.LeaseTTL),
		CoordinatorUnixNano: now.UnixNano(),
		Epoch:               c.alloc.Term(),
		// The cluster's: an agent that predates shed answers takes a
		// version equal to its own, with no rules, as "the cluster has
		// none".
		RulesVersion: v.Rules().Version(),
	}
	if c.alloc.Shed(req.GetNode(), now.UnixNano()) {
		resp.RenewUnixNano = now.Add(set.LeaseTTL).UnixNano()
	}
	return resp
}
