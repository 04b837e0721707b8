package agent

import (
	"github.com/allot-io/allot/internal/agentdrive"
	allotpb "github.com/allot-io/allot/proto"
)

// driven is an agent's reporting as the simulator drives it
// (internal/agentdrive): the hooks no gateway needs, kept off the API
// every gateway sees. New hands it to a Transport that is an
// agentdrive.Transport, and starts no goroutine.
type driven struct{ a *Agent }

// Prepare builds the next report in its parts (prepareReport).
func (d driven) Prepare(urgent bool) []agentdrive.Exchange {
	var out []agentdrive.Exchange
	for x := d.a.prepareReport(urgent); x != nil; x = x.next {
		out = append(out, agentdrive.Exchange{Request: x.req, Deliver: func(resp *allotpb.ReportResponse, err error) {
			d.a.deliver(x, resp, err)
		}})
	}
	return out
}

// WantsEarly is wantsEarlyReport.
func (d driven) WantsEarly() bool { return d.a.wantsEarlyReport() }

// prepareReport builds the next report, for the driver that carries
// reports itself: it cuts usage and turns busy keys into hot keys, as the
// background reporter would. An urgent report holds only the keys running
// low, and is nil when none is.
func (a *Agent) prepareReport(urgent bool) *exchange {
	if a.rep == nil {
		return nil
	}
	return a.rep.prepare(urgent)
}

// deliver applies a coordinator's answer to a prepared report, or the
// failure to get one (resp nil, err set).
func (a *Agent) deliver(x *exchange, resp *allotpb.ReportResponse, err error) {
	if a.rep == nil || x == nil {
		return
	}
	a.rep.deliver(x, resp, err)
}

// wantsEarlyReport reports, once, that an early (urgent) report is due: a
// leased key is running low, or a lowered lease is to be confirmed. Like
// the agent's own reporter, it says so at most ten times an interval; one
// asked for sooner stays asked for, and is answered by a later call.
func (a *Agent) wantsEarlyReport() bool {
	select {
	case <-a.early:
		if a.earlyWait() == 0 {
			return true
		}
		a.askEarly()
		return false
	default:
		return false
	}
}
