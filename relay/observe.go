package relay

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/semconv"
)

// instrumentationName names the relay's meter and tracer.
const instrumentationName = "github.com/gormoutbox/outbox/relay"

// Attribute keys of the relay's metrics and spans.
const (
	attrTable = attribute.Key("outbox.table")
	attrRelay = attribute.Key("outbox.relay.id")
	// attrEventType labels the metrics per event type (a metric label,
	// kept stable for dashboards); spans use internal/semconv's names, as
	// the adapters' do.
	attrEventType = attribute.Key("outbox.event.type")
	attrOutcome   = attribute.Key("outbox.outcome")
	attrClaimed   = attribute.Key("outbox.batch.claimed")
)

// instruments are the relay's metrics.
type instruments struct {
	meter                                            metric.Meter
	claimed, published, failed, dead, released, lost metric.Int64Counter
	rescued                                          metric.Int64Counter
	publishDuration, lag                             metric.Float64Histogram
	pending                                          metric.Int64ObservableGauge
	oldest                                           metric.Float64ObservableGauge
	walInstruments
	byType sync.Map     // event type -> metric.MeasurementOption (typeAttrs)
	types  atomic.Int64 // entries of byType
}

// maxTypeAttrs bounds the attribute sets typeAttrs keeps.
const maxTypeAttrs = 1000

// typeAttrs returns the attributes of a measurement of table and event
// type, built once per type (the first 1,000 types; the others each time):
// a relay records a few per event.
func (in *instruments) typeAttrs(table, typ string) metric.MeasurementOption {
	if v, ok := in.byType.Load(typ); ok {
		return v.(metric.MeasurementOption)
	}
	o := metric.WithAttributeSet(attribute.NewSet(attrTable.String(table), attrEventType.String(typ)))
	if in.types.Load() < maxTypeAttrs {
		if _, loaded := in.byType.LoadOrStore(typ, o); !loaded {
			in.types.Add(1)
		}
	}
	return o
}

func newInstruments(mp metric.MeterProvider) (*instruments, error) {
	m := mp.Meter(instrumentationName)
	in := &instruments{meter: m}
	var err error
	counter := func(name, desc string) metric.Int64Counter {
		if err != nil {
			return nil
		}
		var c metric.Int64Counter
		c, err = m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit("{event}"))
		return c
	}
	in.claimed = counter("outbox.events.claimed", "Events claimed by a relay.")
	in.published = counter("outbox.events.published", "Events delivered and marked published.")
	in.failed = counter("outbox.events.failed", "Failed deliveries scheduled for another attempt.")
	in.dead = counter("outbox.events.dead", "Events marked dead.")
	in.released = counter("outbox.events.released", "Events handed back without spending an attempt (publisher unavailable, snoozed, shutdown).")
	in.lost = counter("outbox.leases.lost", "Outcomes refused because another relay took the events over after the lease expired.")
	in.rescued = counter("outbox.events.rescued", "Events whose claim expired without an outcome, taken back by a rescue (an attempt spent; dead ones are counted in outbox.events.dead too).")
	if err != nil {
		return nil, err
	}
	buckets := metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
	if in.publishDuration, err = m.Float64Histogram("outbox.publish.duration", metric.WithUnit("s"),
		metric.WithDescription("Time one delivery took in the publisher."), buckets); err != nil {
		return nil, err
	}
	if in.lag, err = m.Float64Histogram("outbox.event.lag", metric.WithUnit("s"),
		metric.WithDescription("From when an event became available (its commit, or its retry time) to its publication."), buckets); err != nil {
		return nil, err
	}

	// Gauges of the table, observed while the relay runs (observeTable).
	if in.pending, err = m.Int64ObservableGauge("outbox.events.pending", metric.WithUnit("{event}"),
		metric.WithDescription("Events waiting for delivery (pending or failed awaiting retry).")); err != nil {
		return nil, err
	}
	if in.oldest, err = m.Float64ObservableGauge("outbox.events.oldest_pending_age", metric.WithUnit("s"),
		metric.WithDescription("How long the oldest deliverable pending event has waited.")); err != nil {
		return nil, err
	}
	if err = in.walInstruments.init(m); err != nil {
		return nil, err
	}
	return in, nil
}

// observeTable registers the callback that reads the table's gauges when
// the metrics are collected; unregister it when the relay stops.
func (in *instruments) observeTable(table string, stats func(context.Context) (*Stats, error)) (metric.Registration, error) {
	set := metric.WithAttributes(attrTable.String(table))
	return in.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		s, err := stats(ctx)
		if err != nil {
			return err
		}
		o.ObserveInt64(in.pending, s.Counts[outbox.StatusPending]+s.Counts[outbox.StatusFailed], set)
		o.ObserveFloat64(in.oldest, s.OldestPendingAge.Seconds(), set)
		return nil
	}, in.pending, in.oldest)
}

// record counts one recorded outcome.
func (in *instruments) record(ctx context.Context, o *outcome, table string, now time.Time) {
	attrs := in.typeAttrs(table, o.row.Type)
	if o.expired {
		in.rescued.Add(ctx, 1, attrs)
		if o.kind == dead {
			in.dead.Add(ctx, 1, attrs)
		}
		return
	}
	switch o.kind {
	case published:
		in.published.Add(ctx, 1, attrs)
		if !o.row.AvailableAt.IsZero() {
			in.lag.Record(ctx, max(now.Sub(o.row.AvailableAt).Seconds(), 0), attrs)
		}
	case failed:
		in.failed.Add(ctx, 1, attrs)
	case dead:
		in.dead.Add(ctx, 1, attrs)
	case released:
		in.released.Add(ctx, 1, attrs)
	}
}

// tracing starts the relay's spans.
type tracing struct {
	tracer trace.Tracer
	relay  string
	table  string
}

var traceContext = propagation.TraceContext{}

// batchSpan starts the span of one claim and its deliveries.
func (t *tracing) batchSpan(ctx context.Context) (context.Context, trace.Span) {
	return t.tracer.Start(ctx, "outbox.relay batch", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithAttributes(attrRelay.String(t.relay), attrTable.String(t.table)))
}

// deliverySpan starts the span of one delivery as a child of the span that
// emitted the event (its traceparent header), linked to the batch span, and
// returns the envelope with its trace headers pointing at the new span, so
// that consumers continue the trace from the delivery.
func (t *tracing) deliverySpan(ctx context.Context, batch trace.Span, e *outbox.Envelope) (context.Context, trace.Span, *outbox.Envelope) {
	// Without a traceparent the parent stays the batch span in ctx.
	parent := traceContext.Extract(ctx, propagation.MapCarrier(e.Headers))
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(semconv.EventType.String(e.Type), semconv.EventID.String(e.ID),
			semconv.EventSource.String(e.Source), semconv.EventAttempt.Int(e.Attempt), attrRelay.String(t.relay)),
	}
	if sc := batch.SpanContext(); sc.IsValid() && !trace.SpanContextFromContext(parent).Equal(sc) {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
	}
	sctx, span := t.tracer.Start(parent, "outbox publish "+e.Type, opts...)
	if !span.SpanContext().IsValid() { // tracing is off
		return sctx, span, e
	}
	out := *e
	out.Headers = maps.Clone(e.Headers)
	if out.Headers == nil {
		out.Headers = map[string]string{}
	}
	traceContext.Inject(sctx, propagation.MapCarrier(out.Headers))
	return sctx, span, &out
}

func endDelivery(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func defaultProviders(mp metric.MeterProvider, tp trace.TracerProvider) (metric.MeterProvider, trace.TracerProvider) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return mp, tp
}
