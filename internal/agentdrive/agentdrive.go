package agentdrive

import (
	"context"

	allotpb "github.com/allot-io/allot/proto"
)

// Transport is an agent.Transport whose owner drives the agent's reports:
// given as agent.Config.Transport, it makes agent.New start no goroutine
// (no clock refresher, no housekeeping, no reporter) and call Drive, once,
// with the agent's Reports. Report still carries what the agent sends by
// itself: its last reports, when it is closed.
type Transport interface {
	Report(ctx context.Context, req *allotpb.ReportRequest) (*allotpb.ReportResponse, error)
	Drive(r Reports)
}

// Reports are a driven agent's reporting, for its owner to carry.
type Reports interface {
	// Prepare builds the next report, as the agent's reporter would: it
	// cuts usage and turns busy keys into hot keys. An urgent report
	// holds only the keys running low, and is none when no key is. A
	// report too big for one message comes in parts, each carried, and
	// its answer delivered, on its own.
	Prepare(urgent bool) []Exchange
	// WantsEarly reports, once, that an early (urgent) report is due: a
	// leased key is running low, or a lowered lease is to be confirmed.
	// Like the agent's own reporter, it says so at most ten times an
	// interval; one asked for sooner stays asked for, and a later call
	// answers it.
	WantsEarly() bool
}

// Exchange is one part of a report: the request to carry to a
// coordinator, and Deliver, which applies the coordinator's answer to it,
// or the failure to get one (resp nil, err set). Deliver is called once.
type Exchange struct {
	Request *allotpb.ReportRequest
	Deliver func(resp *allotpb.ReportResponse, err error)
}
