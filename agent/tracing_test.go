package agent

import (
	"context"
	"testing"
	"time"

	"github.com/allot-io/allot/algo"
	"github.com/allot-io/allot/coordinator"
	"github.com/allot-io/allot/internal/tracing/exporter"
	"github.com/allot-io/allot/internal/tracing/tracetest"
	"github.com/allot-io/allot/lease"
	"github.com/allot-io/allot/rules"
)

// traceTo is a provider exporting every span to rcv, flushed at the
// test's end.
func traceTo(t *testing.T, rcv *tracetest.Receiver, service, node string) *exporter.Provider {
	t.Helper()
	p, err := exporter.New(context.Background(), exporter.Config{Endpoint: rcv.Addr(), Insecure: true, SampleRatio: 1,
		Service: service, NodeID: node, Region: "eu-west", BatchTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p
}

// TestReportTraced: an in-process coordinator and agent, both tracing to
// one OTLP receiver: each report the agent sends is a client span, the
// coordinator's span for it is that span's child, in the same trace, and
// the commit of the report's usage through Raft is the coordinator
// span's child in turn.
func TestReportTraced(t *testing.T) {
	rcv := tracetest.Start(t)
	cs := coordinatorsWith(t, 1, func(cfg *coordinator.Config) {
		cfg.TracerProvider = traceTo(t, rcv, "allot-coordinator", cfg.NodeID)
	})
	putRules(t, cs[0].GRPCAddr(), rule("per-tenant", rules.Tenant, algo.TokenBucket, 1000, time.Second, lease.Capacity))
	a := newAgent(t, "gw-1", addrs(cs), func(cfg *Config) { cfg.TracerProvider = traceTo(t, rcv, "allot-agent", "gw-1") })
	for range 5 {
		a.Check(Request{Tenant: "acme"})
	}
	// A report that carries the checks' usage commits it through Raft.
	withUsage := func(s tracetest.Span) bool {
		return s.Service == "allot-coordinator" && s.Name == "allot.v1.AgentService/Report" && s.Attrs["allot.report.usage_counts"] != "0"
	}
	server := rcv.Wait(t, 20*time.Second, "a coordinator Report span with usage", withUsage)
	var client tracetest.Span
	for _, s := range rcv.Spans() {
		if s.SpanID == server.ParentID {
			client = s
		}
	}
	if client.SpanID == "" {
		client = rcv.Wait(t, 10*time.Second, "the agent span "+server.ParentID, func(s tracetest.Span) bool { return s.SpanID == server.ParentID })
	}
	if client.Service != "allot-agent" || client.Name != "allot.agent.report" || client.TraceID != server.TraceID || client.ParentID != "" {
		t.Errorf("the coordinator's span's parent %v: want the agent's root report span", client)
	}
	for k, v := range map[string]string{"allot.node": "gw-1", "allot.region": "eu-west", "rpc.grpc.status_code": "0"} {
		if server.Attrs[k] != v {
			t.Errorf("coordinator span: %s = %q, want %q", k, server.Attrs[k], v)
		}
	}
	if client.Attrs["allot.node"] != "gw-1" || client.Attrs["allot.report.attempts"] != "1" || client.Resource["service.instance.id"] != "gw-1" {
		t.Errorf("agent span attributes %v, resource %v", client.Attrs, client.Resource)
	}
	apply := rcv.Wait(t, 10*time.Second, "raft.apply under "+server.SpanID, func(s tracetest.Span) bool {
		return s.Name == "raft.apply" && s.ParentID == server.SpanID
	})
	if apply.Attrs["allot.raft.command"] != "reports" || apply.Attrs["allot.raft.batched"] != "true" {
		t.Errorf("raft.apply attributes %v", apply.Attrs)
	}
}
