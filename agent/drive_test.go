package agent

import (
	"context"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator/allocator"
	"github.com/allot-io/allot/internal/agentdrive"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// byHand is a transport whose test drives the agent's reports itself, by
// the agent's prepareReport and deliver: as an agentdrive.Transport it
// makes New start no goroutine. The Reports it is handed go unused.
type byHand struct{ Transport }

func (byHand) Drive(agentdrive.Reports) {}

// driver is an agentdrive.Transport that keeps the Reports it is handed,
// as the simulator does.
type driver struct {
	engineTransport
	reports []agentdrive.Reports
}

func (d *driver) Drive(r agentdrive.Reports) { d.reports = append(d.reports, r) }

// TestDrivenAgentReportsByItsDriver: an agent whose Transport is an
// agentdrive.Transport hands its reporting to it, once, and the reports
// its driver carries work as the reporter's do: a busy key is reported,
// leased, and the lease applied. An agent on a plain Transport is not
// driven.
func TestDrivenAgentReportsByItsDriver(t *testing.T) {
	clk := newManualClock()
	r := rule("quota", rules.Tenant, algo.TokenBucket, 100, time.Second, lease.Quota)
	eng, err := allocator.NewEngine(allocator.EngineConfig{Region: "eu-west", ReportInterval: time.Second, Rules: []rules.Rule{r}}, clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	d := &driver{engineTransport: engineTransport{eng, clk}}
	a, err := New(Config{NodeID: "gw-1", Region: "eu-west", Rules: []rules.Rule{r}, Clock: clk, ReportInterval: time.Second, Transport: d})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(context.Background()) })
	if len(d.reports) != 1 || !a.manual {
		t.Fatalf("Drive called %d times (manual %v), want once", len(d.reports), a.manual)
	}
	rep := d.reports[0]
	for range 5 {
		for range 50 {
			a.Check(Request{Tenant: "acme"})
			clk.Advance(20 * time.Millisecond)
		}
		xs := rep.Prepare(false)
		if len(xs) == 0 {
			t.Fatal("a regular report has no part")
		}
		for _, x := range xs {
			resp, err := eng.Report(clk.Now(), x.Request)
			x.Deliver(resp, err)
		}
		eng.Round(clk.Now())
	}
	if l, ok := a.Lease("quota", "acme"); !ok || !(l > 0) {
		t.Errorf("after five driven reports the busy key holds no lease (%g, %v)", l, ok)
	}
	// Asking takes the early report due: a second ask finds none.
	if first, second := rep.WantsEarly(), rep.WantsEarly(); first && second {
		t.Error("an early report due was reported twice")
	}

	plain, err := New(Config{NodeID: "gw-2", Region: "eu-west", Rules: []rules.Rule{r}, Clock: clk, ReportInterval: time.Second, Transport: engineTransport{eng, clk}})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close(context.Background())
	if plain.manual {
		t.Error("an agent on a plain Transport is driven by hand")
	}
}
