package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/allot-io/allot/internal/tracing"
	"github.com/allot-io/allot/internal/tracing/exporter"
	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// traceFlushTimeout bounds the flush of the spans still waiting when a
// command ends: a collector out of reach does not hold up an exit.
const traceFlushTimeout = 5 * time.Second

// traceFlags are the OpenTelemetry flags of the commands that serve or
// call coordinators: where to send spans and what share to keep.
type traceFlags struct {
	endpoint string
	insecure bool
	sample   float64
}

func (t *traceFlags) register(f *flags) {
	f.StringVar(&t.endpoint, "otlp-endpoint", "", "send OpenTelemetry traces to this OTLP/gRPC collector, host:port (empty: no tracing, at no cost)")
	f.BoolVar(&t.insecure, "otlp-insecure", false, "send traces to --otlp-endpoint in plaintext rather than over TLS")
	f.Float64Var(&t.sample, "trace-sample", exporter.DefaultSampleRatio, "share of the traces started here that are kept, from 0 to 1; a request whose traceparent is sampled is traced whatever this says")
}

// registerClient adds the flags as an operator command has them: it
// traces itself, one span for the command and one per call it makes.
func (t *traceFlags) registerClient(f *flags) {
	f.StringVar(&t.endpoint, "otlp-endpoint", "", "send this command's trace (a span for the command, one per call to the cluster) to this OTLP/gRPC collector, host:port (empty: none)")
	f.BoolVar(&t.insecure, "otlp-insecure", false, "send the trace to --otlp-endpoint in plaintext rather than over TLS")
	f.Float64Var(&t.sample, "trace-sample", exporter.DefaultSampleRatio, "share of this command's runs that are traced, from 0 to 1")
}

// provider builds the process's TracerProvider, nil without
// --otlp-endpoint; a ratio out of range is a usage error of cmd.
func (t *traceFlags) provider(ctx context.Context, cmd, service, node, region string, log hclog.Logger) (*exporter.Provider, error) {
	if t.endpoint == "" {
		return nil, nil
	}
	if t.sample < 0 || t.sample > 1 {
		return nil, usagef(cmd, "--trace-sample %v: want a number from 0 to 1", t.sample)
	}
	p, err := exporter.New(ctx, exporter.Config{Endpoint: t.endpoint, Insecure: t.insecure, SampleRatio: t.sample,
		Service: service, NodeID: node, Region: region, Version: readBuildInfo().version, Logger: log})
	if err != nil {
		return nil, usagef(cmd, "--otlp-endpoint: %v", err)
	}
	return p, nil
}

// flushTraces shuts p down, exporting what waits within
// traceFlushTimeout; a failure is logged, not the command's.
func flushTraces(p *exporter.Provider, log hclog.Logger) {
	if p == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), traceFlushTimeout)
	defer cancel()
	if err := p.Shutdown(ctx); err != nil {
		log.Warn("spans lost at exit", "error", err)
	}
}

// cliTrace is an operator command's tracing: one span for the command,
// started at its first dial, the parent of a client span for each call it
// makes; the span ends, and the spans are flushed, when the command
// returns (env.exit). Copies of a command's clientFlags share it.
type cliTrace struct {
	traceFlags
	cmd string
	e   *env

	once   sync.Once
	tracer trace.Tracer // nil: tracing off
	root   trace.Span
	err    error
}

// start builds the provider and starts the command's span, once. It
// returns a nil tracer when tracing is off, for a nil t too (client flags
// made by hand, as the demo's).
func (t *cliTrace) start() (trace.Tracer, trace.Span, error) {
	if t == nil || t.endpoint == "" {
		return nil, nil, nil
	}
	t.once.Do(func() {
		if t.e == nil || t.e.exit == nil {
			// Not run through run(): nothing would end the span.
			t.err = fmt.Errorf("tracing %s: not run as a command", t.cmd)
			return
		}
		log := hclog.New(&hclog.LoggerOptions{Name: "allot", Level: hclog.Warn, Output: t.e.stderr})
		p, err := t.provider(context.Background(), t.cmd, "allot", "", "", log)
		if err != nil {
			t.err = err
			return
		}
		t.tracer = p.Tracer("github.com/allot-io/allot/cmd/allot")
		_, t.root = t.tracer.Start(context.Background(), "allot "+t.cmd, trace.WithAttributes(attribute.String("allot.command", t.cmd)))
		end := func(err error) {
			if err != nil && !errors.Is(err, errHelp) {
				tracing.Fail(t.root, err)
			}
			t.root.End()
			flushTraces(p, log)
		}
		t.e.exit.add(end)
	})
	return t.tracer, t.root, t.err
}

// exitHooks run when a command returns, with its error.
type exitHooks struct {
	mu  sync.Mutex
	fns []func(error)
}

func (h *exitHooks) add(fn func(error)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.fns = append(h.fns, fn)
}

func (h *exitHooks) run(err error) {
	h.mu.Lock()
	fns := h.fns
	h.fns = nil
	h.mu.Unlock()
	for _, fn := range fns {
		fn(err)
	}
}
