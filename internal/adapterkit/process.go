package adapterkit

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox"
)

// TraceContext is the W3C propagator: an envelope carries traceparent and
// tracestate only.
var TraceContext = propagation.TraceContext{}

// Process runs fn under a consumer span named name that continues the
// trace of carrier (the event's traceparent and tracestate headers), with
// attrs (ProcessAttributes). A failure of fn is recorded on the span,
// which ends when fn returns; fn's error is returned as it is.
func Process(ctx context.Context, tracer trace.Tracer, name string, carrier propagation.TextMapCarrier,
	attrs []attribute.KeyValue, fn func(ctx context.Context) error) error {
	ctx = TraceContext.Extract(ctx, carrier)
	ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	defer span.End()
	err := fn(ctx)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// Headers returns e's headers as a trace carrier.
func Headers(e *outbox.Envelope) propagation.MapCarrier { return propagation.MapCarrier(e.Headers) }
