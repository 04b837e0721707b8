package main

import (
	"strings"
	"testing"
	"time"

	"github.com/allot-io/allot/internal/tracing/tracetest"
)

// TestCLITraces: a real allot coordinator with --otlp-endpoint at the
// test's OTLP receiver, and 'allot rules put' with the same flags: the
// command's span is the root of a trace in which its PutRules call is a
// client span, the coordinator's PutRules server span that call's child,
// and the Raft commit of the rules the server span's child.
func TestCLITraces(t *testing.T) {
	if testing.Short() {
		t.Skip("runs allot processes")
	}
	rcv := tracetest.Start(t)
	env := cliEnv("ALLOT_OTLP_ENDPOINT="+rcv.Addr(), "ALLOT_OTLP_INSECURE=true") // the flags, from the environment
	addrs := loopbackAddrs(t, 3)
	coord := startProcess(t, env, "c1", "coordinator", "--node-id", "c1", "--data-dir", t.TempDir(), "--bootstrap", "--region", "eu-west",
		"--raft-addr", addrs[0], "--grpc-addr", addrs[1], "--http-addr", addrs[2], "--trace-sample", "1")
	eventually(t, "c1 /readyz", []*process{coord}, func() (bool, string) { return httpOK("http://" + addrs[2] + "/readyz") })
	rulesFile := writeTemp(t, "rules.yaml", "rules:\n  - {name: plan-quota, scope: tenant, algorithm: fixed_window, limit: 5, period: 1m, intent: quota}\n")
	if code, stdout, stderr := runAllot(t, env, "rules", "put", rulesFile, "--coordinator", addrs[1], "--trace-sample", "1"); code != exitOK {
		t.Fatalf("rules put: exit %d, %s%s", code, stdout, stderr)
	}
	// The command flushed its spans as it exited; the coordinator does
	// as it stops.
	coord.stop(t)

	const method = "allot.v1.RulesService/PutRules"
	wait := func(what string, match func(tracetest.Span) bool) tracetest.Span {
		return rcv.Wait(t, 30*time.Second, what, match)
	}
	root := wait("the command's span", tracetest.Named("allot", "allot rules put"))
	call := wait("the command's PutRules call", tracetest.Named("allot", method))
	served := wait("the coordinator's PutRules", tracetest.Named("allot-coordinator", method))
	apply := wait("the rules' raft.apply", func(s tracetest.Span) bool { return s.Name == "raft.apply" && s.ParentID == served.SpanID })
	if root.ParentID != "" || call.ParentID != root.SpanID || served.ParentID != call.SpanID || served.TraceID != root.TraceID || apply.TraceID != root.TraceID {
		t.Errorf("parents:\n  %v\n  %v\n  %v\n  %v", root, call, served, apply)
	}
	if !strings.HasSuffix(call.Attrs["server.address"], addrs[1]) || call.Attrs["rpc.grpc.status_code"] != "0" {
		t.Errorf("client span attributes %v", call.Attrs)
	}
	if served.Attrs["allot.rules"] != "1" || apply.Attrs["allot.raft.command"] != "rules" {
		t.Errorf("server span %v, raft.apply %v", served.Attrs, apply.Attrs)
	}
	for k, v := range map[string]string{"service.name": "allot-coordinator", "allot.node": "c1", "allot.region": "eu-west", "service.instance.id": "c1"} {
		if served.Resource[k] != v {
			t.Errorf("coordinator resource %s = %q, want %q", k, served.Resource[k], v)
		}
	}
	if root.Resource["service.version"] == "" {
		t.Errorf("the CLI's resource has no version: %v", root.Resource)
	}
}

// TestTraceFlagsRefused: a sample ratio out of range is a usage error.
func TestTraceFlagsRefused(t *testing.T) {
	var out, errs strings.Builder
	code := run(t.Context(), &env{args: []string{"rules", "get", "--otlp-endpoint", "127.0.0.1:1", "--trace-sample", "2"},
		stdout: &out, stderr: &errs, getenv: func(string) string { return "" }})
	if code != exitUsage || !strings.Contains(errs.String(), "--trace-sample 2: want a number from 0 to 1") {
		t.Errorf("exit %d, %q", code, errs.String())
	}
}
