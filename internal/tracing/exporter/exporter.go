// Package exporter builds the TracerProvider of an allot process: the
// OpenTelemetry SDK, sampling a ratio of the traces that start here (and
// following the caller's choice for those that arrive), exporting in
// batches to an OTLP/gRPC collector. Only the allot command links it; the
// libraries take a trace.TracerProvider (internal/tracing).
package exporter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// DefaultSampleRatio is the share of new traces sampled when an endpoint
// is set: traces with a sampled parent are always kept, and a check on
// the sidecar's hot path is otherwise recorded once in a hundred.
const DefaultSampleRatio = 0.01

// Config configures a provider.
type Config struct {
	// Endpoint is the collector's OTLP/gRPC address, host:port. Empty is
	// tracing off: New returns a nil provider.
	Endpoint string
	// Insecure sends in plaintext; otherwise over TLS, verified against
	// the system's roots.
	Insecure bool
	// SampleRatio is the share of traces started here that are sampled,
	// from 0 to 1; a span with a remote parent follows its parent's
	// sampled flag.
	SampleRatio float64
	// Service is service.name: allot-agent, allot-coordinator or allot.
	Service string
	// NodeID, Region and Version describe the process: service.instance.id
	// and allot.node, allot.region, service.version.
	NodeID, Region, Version string
	// BatchTimeout is how long a span may wait to be exported with
	// others (default 5s).
	BatchTimeout time.Duration
	// Logger receives export failures, at most one a minute; nil
	// discards them.
	Logger hclog.Logger
}

// Provider is a TracerProvider that exports to a collector.
type Provider struct {
	*sdktrace.TracerProvider
}

var _ trace.TracerProvider = (*Provider)(nil)

// New builds the provider cfg describes, or nil when cfg has no endpoint.
// It does not wait for the collector: spans wait in the batch, and are
// dropped when it fills, while the collector cannot be reached.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.Endpoint == "" {
		return nil, nil
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("trace sample ratio %v: want a number from 0 to 1", cfg.SampleRatio)
	}
	opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(cfg.Endpoint)}
	if cfg.Insecure {
		opts = append(opts, otlptracegrpc.WithInsecure())
	}
	exp, err := otlptracegrpc.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter for %s: %w", cfg.Endpoint, err)
	}
	attrs := []attribute.KeyValue{attribute.String("service.name", cfg.Service)}
	for k, v := range map[string]string{"service.version": cfg.Version, "service.instance.id": cfg.NodeID, "allot.node": cfg.NodeID, "allot.region": cfg.Region} {
		if v != "" {
			attrs = append(attrs, attribute.String(k, v))
		}
	}
	// OTEL_RESOURCE_ATTRIBUTES may add to the resource (a deployment's
	// name, say); what the flags say wins.
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(), resource.WithAttributes(attrs...))
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = hclog.NewNullLogger()
	}
	var bsp []sdktrace.BatchSpanProcessorOption
	if cfg.BatchTimeout > 0 {
		bsp = append(bsp, sdktrace.WithBatchTimeout(cfg.BatchTimeout))
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithResource(res),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithBatcher(&loggedExporter{SpanExporter: exp, log: log, endpoint: cfg.Endpoint}, bsp...),
	)
	return &Provider{TracerProvider: tp}, nil
}

// Shutdown exports the spans still waiting, within ctx, and stops the
// exporter. A nil provider has nothing to do.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	if err := p.TracerProvider.Shutdown(ctx); err != nil {
		return fmt.Errorf("flushing traces: %w", err)
	}
	return nil
}

// TracerProviderOrNil is p as a trace.TracerProvider, nil (tracing off) for a
// nil p: a nil *Provider in an interface would not be nil.
func (p *Provider) TracerProviderOrNil() trace.TracerProvider {
	if p == nil {
		return nil
	}
	return p
}

// loggedExporter logs failed exports to the process's logger, at most
// once a minute, instead of leaving them to OpenTelemetry's global error
// handler, which prints every one with the standard library's log.
type loggedExporter struct {
	sdktrace.SpanExporter
	log      hclog.Logger
	endpoint string

	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (e *loggedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := e.SpanExporter.ExportSpans(ctx, spans)
	if err == nil {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.dropped += len(spans)
	if now := time.Now(); now.Sub(e.last) >= time.Minute {
		e.log.Warn("spans not exported to the OTLP collector", "endpoint", e.endpoint, "spans", e.dropped, "error", err)
		e.last, e.dropped = now, 0
	}
	return nil
}
