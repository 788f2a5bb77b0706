package outboxredis_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
)

// spanRecorder is a TracerProvider that records the spans started through
// it (the OpenTelemetry SDK is not a dependency of the module).
type spanRecorder struct {
	embedded.TracerProvider
	mu    sync.Mutex
	spans []*recordedSpan
}

func (r *spanRecorder) Tracer(string, ...trace.TracerOption) trace.Tracer {
	return recordingTracer{r: r}
}

func (r *spanRecorder) all() []*recordedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*recordedSpan(nil), r.spans...)
}

type recordingTracer struct {
	embedded.Tracer
	r *spanRecorder
}

func (t recordingTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	s := &recordedSpan{
		Span:   trace.SpanFromContext(context.Background()), // a no-op span for the rest of the interface
		name:   name,
		kind:   cfg.SpanKind(),
		attrs:  cfg.Attributes(),
		parent: parent,
		sc: trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: parent.TraceID(), SpanID: trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: parent.TraceFlags(),
		}),
	}
	t.r.mu.Lock()
	t.r.spans = append(t.r.spans, s)
	t.r.mu.Unlock()
	return trace.ContextWithSpan(ctx, s), s
}

type recordedSpan struct {
	trace.Span
	name   string
	kind   trace.SpanKind
	attrs  []attribute.KeyValue
	parent trace.SpanContext
	sc     trace.SpanContext

	mu     sync.Mutex
	ended  bool
	status codes.Code
	errs   []error
}

func (s *recordedSpan) SpanContext() trace.SpanContext { return s.sc }
func (s *recordedSpan) IsRecording() bool              { return true }
func (s *recordedSpan) End(...trace.SpanEndOption)     { s.mu.Lock(); s.ended = true; s.mu.Unlock() }
func (s *recordedSpan) SetStatus(c codes.Code, _ string) {
	s.mu.Lock()
	s.status = c
	s.mu.Unlock()
}
func (s *recordedSpan) RecordError(err error, _ ...trace.EventOption) {
	s.mu.Lock()
	s.errs = append(s.errs, err)
	s.mu.Unlock()
}

func (s *recordedSpan) attr(key string) attribute.Value {
	for _, kv := range s.attrs {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func TestConsumerContinuesTheEventsTrace(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "con-trace")

	// The producer's span, as outbox.Emit stores it in the headers.
	producer := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled,
	})
	headers := map[string]string{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), producer), propagation.MapCarrier(headers))
	traced := envelope("traced", "order.created")
	traced.Headers = headers
	failing := envelope("failing", "order.created")
	failing.Headers = headers

	type seen struct {
		sc       trace.SpanContext
		attempts int
	}
	var (
		mu  sync.Mutex
		got = map[string]*seen{}
	)
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		mu.Lock()
		defer mu.Unlock()
		s := got[e.ID]
		if s == nil {
			s = &seen{}
			got[e.ID] = s
		}
		s.sc = trace.SpanContextFromContext(ctx)
		s.attempts++
		if e.ID == "failing" && s.attempts == 1 {
			return errors.New("once")
		}
		return nil
	})

	// Without a tracer provider of its own (the global no-op one), the
	// handler's context still carries the producer's trace.
	stop := run(t, newConsumer(t, rdb, stream, "g1", "c", h, consumerOpts(t)...))
	publish(t, rdb, stream, traced)
	eventually(t, 5*time.Second, "the traced event", func() bool { mu.Lock(); defer mu.Unlock(); return got["traced"] != nil })
	stop()
	mu.Lock()
	if sc := got["traced"].sc; sc.TraceID() != producer.TraceID() {
		t.Errorf("handler's trace %v, want the producer's %v", sc.TraceID(), producer.TraceID())
	}
	got = map[string]*seen{}
	mu.Unlock()

	// With a recording provider: a consumer span, child of the producer's.
	rec := &spanRecorder{}
	stop = run(t, newConsumer(t, rdb, stream, "g2", "c", h, consumerOpts(t, consume.WithTracerProvider(rec))...))
	publish(t, rdb, stream, failing)
	eventually(t, 5*time.Second, "both events, the failing one twice", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return got["traced"] != nil && got["failing"] != nil && got["failing"].attempts == 2
	})
	stop()

	spans := rec.all()
	if len(spans) != 3 {
		t.Fatalf("%d spans, want 3 (traced, failing twice)", len(spans))
	}
	var failed, ok int
	for _, s := range spans {
		if s.name != "outbox consume order.created" || s.kind != trace.SpanKindConsumer || !s.ended {
			t.Errorf("span %q kind %v ended %v", s.name, s.kind, s.ended)
		}
		if s.parent.SpanID() != producer.SpanID() || !s.parent.IsRemote() {
			t.Errorf("span parent %v, want the remote producer span %v", s.parent.SpanID(), producer.SpanID())
		}
		id := s.attr("cloudevents.event_id").AsString()
		if s.attr("cloudevents.event_type").AsString() != "order.created" || s.attr("messaging.destination.name").AsString() != stream ||
			s.attr("messaging.consumer.group.name").AsString() != "g2" || s.attr("outbox.event.attempt").AsInt64() != 1 {
			t.Errorf("span attributes %v", s.attrs)
		}
		switch {
		case id == "failing" && s.status == codes.Error && len(s.errs) == 1:
			failed++
			if s.attr("messaging.redis.delivery_count").AsInt64() != 1 {
				t.Errorf("failed delivery count %v", s.attr("messaging.redis.delivery_count"))
			}
		case s.status != codes.Error && len(s.errs) == 0:
			ok++
		default:
			t.Errorf("span of %s: status %v, errors %v", id, s.status, s.errs)
		}
	}
	if failed != 1 || ok != 2 {
		t.Errorf("%d failed and %d successful spans, want 1 and 2", failed, ok)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, s := range got {
		if s.sc.TraceID() != producer.TraceID() {
			t.Errorf("%s: handler's trace %v, want %v", id, s.sc.TraceID(), producer.TraceID())
		}
	}
}
