package outboxasynq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// taskOf builds the task a Publisher would enqueue for e.
func taskOf(t testing.TB, e *outbox.Envelope) *asynq.Task {
	t.Helper()
	b, err := json.Marshal(e)
	must(t, err)
	return asynq.NewTaskWithHeaders(e.Type, b, e.Headers)
}

// handle adapts a function to consume.Handler.
type handle = consume.HandlerFunc

func TestHandlerArchivesMalformedPayloads(t *testing.T) {
	calls := 0
	h := outboxasynq.Handler(handle(func(context.Context, *outbox.Envelope) error { calls++; return nil }),
		consume.WithLogger(testLogger(t)))
	for _, payload := range []string{
		"not json",
		"",
		`{"specversion":"0.3","id":"e","source":"s","type":"t"}`,
		`{"specversion":"1.0","source":"s","type":"t"}`,
		`{"specversion":"1.0","id":"e","source":"s","type":"t"} trailing`,
	} {
		err := h.ProcessTask(t.Context(), asynq.NewTask("order.created", []byte(payload)))
		if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, outboxasynq.ErrInvalidTask) || !errors.Is(err, outbox.ErrInvalidEnvelope) ||
			!errors.Is(err, consume.ErrMalformed) {
			t.Errorf("payload %q: %v, want SkipRetry, ErrInvalidTask, ErrInvalidEnvelope and consume.ErrMalformed", payload, err)
		}
	}
	if calls != 0 {
		t.Errorf("the handler ran %d times on malformed payloads", calls)
	}
}

// What ProcessTask returns for each outcome of the handler: what asynq
// archives (SkipRetry), what IsFailure counts, and the delay RetryDelay
// gives.
func TestHandlerMapsErrors(t *testing.T) {
	cause := errors.New("card declined")
	for name, tc := range map[string]struct {
		ret        error
		skipRetry  bool
		failure    bool
		delay      time.Duration
		wrapsCause bool
	}{
		"nil":         {ret: nil},
		"ordinary":    {ret: cause, failure: true, delay: 50 * time.Millisecond, wrapsCause: true},
		"permanent":   {ret: outbox.Permanent(cause), skipRetry: true, failure: true, wrapsCause: true},
		"skip":        {ret: asynq.SkipRetry, skipRetry: true, failure: true, delay: 50 * time.Millisecond, wrapsCause: true},
		"unavailable": {ret: outbox.Unavailable(cause), delay: 50 * time.Millisecond, wrapsCause: true},
		"snooze":      {ret: outbox.Snooze(cause, 3*time.Second), delay: 3 * time.Second, wrapsCause: true},
		"in progress": {ret: idempotency.ErrInProgress, delay: 50 * time.Millisecond, wrapsCause: true},
	} {
		var got *outbox.Envelope
		h := outboxasynq.Handler(handle(func(_ context.Context, e *outbox.Envelope) error { got = e; return tc.ret }),
			consume.WithRetryDelay(50*time.Millisecond), consume.WithLogger(testLogger(t)))
		e := sampleEnvelope("ev-map", "q")
		err := h.ProcessTask(t.Context(), taskOf(t, e))
		if got == nil || got.ID != e.ID || string(got.Payload) != string(e.Payload) {
			t.Errorf("%s: handler got %+v", name, got)
		}
		if errors.Is(err, asynq.SkipRetry) != tc.skipRetry || outboxasynq.IsFailure(err) != tc.failure {
			t.Errorf("%s: %v: SkipRetry %v, IsFailure %v; want %v, %v", name, err, !tc.skipRetry, !tc.failure, tc.skipRetry, tc.failure)
		}
		if tc.ret == nil && err != nil || tc.wrapsCause && !errors.Is(err, tc.ret) {
			t.Errorf("%s: %v does not wrap %v", name, err, tc.ret)
		}
		if d := outboxasynq.RetryDelay(nil)(0, err, nil); tc.delay > 0 && d != tc.delay {
			t.Errorf("%s: RetryDelay %v, want %v", name, d, tc.delay)
		}
		if outbox.IsPermanent(tc.ret) && !outbox.IsPermanent(err) {
			t.Errorf("%s: lost the Permanent mark: %v", name, err)
		}
	}
}

// After a handler reported its dependency unavailable, the handler pauses
// as a consumer does: the next task is handed back without running, not
// counted, for the rest of the pause.
func TestHandlerPausesAfterAnOutage(t *testing.T) {
	runs := 0
	h := outboxasynq.Handler(handle(func(context.Context, *outbox.Envelope) error {
		runs++
		return outbox.Unavailable(errors.New("its database is down"))
	}), consume.WithLogger(testLogger(t)))
	_ = h.ProcessTask(t.Context(), taskOf(t, sampleEnvelope("ev-1", "q")))
	err := h.ProcessTask(t.Context(), taskOf(t, sampleEnvelope("ev-2", "q")))
	if runs != 1 || outboxasynq.IsFailure(err) {
		t.Errorf("%d runs, the second task's %v (IsFailure %v): want it handed back unrun, uncounted", runs, err, outboxasynq.IsFailure(err))
	}
	if d := outboxasynq.RetryDelay(nil)(0, err, nil); d <= 0 || d > time.Second {
		t.Errorf("handed back for %v, want the rest of the 1s pause", d)
	}
}

func TestIsFailure(t *testing.T) {
	cause := errors.New("x")
	for err, want := range map[error]bool{
		nil:                       false,
		cause:                     true,
		outbox.Permanent(cause):   true,
		outbox.Unavailable(cause): false,
		idempotency.ErrInProgress: false,
		errors.Join(cause, idempotency.ErrInProgress):               false,
		fmt.Errorf("%w: task x", outboxasynq.ErrPredecessorPending): false,
	} {
		if got := outboxasynq.IsFailure(err); got != want {
			t.Errorf("IsFailure(%v) = %v", err, got)
		}
	}
}

// emitter is the span that wrote an event, as a trace context.
var emitter = trace.NewSpanContext(trace.SpanContextConfig{
	TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
	SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
	TraceFlags: trace.FlagsSampled,
})

// newTracer returns an OpenTelemetry SDK TracerProvider recording its
// spans in memory.
func newTracer(t testing.TB) (*sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, sr
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func spanNamed(t testing.TB, spans []sdktrace.ReadOnlySpan, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			if found != nil {
				t.Fatalf("two spans named %q", name)
			}
			found = s
		}
	}
	if found == nil {
		t.Fatalf("no span named %q", name)
	}
	return found
}

func traceparent(sc trace.SpanContext) string {
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"
}

func TestHandlerContinuesTheTraceOfTheEnvelope(t *testing.T) {
	tp, sr := newTracer(t)
	var inHandler trace.SpanContext
	fail := errors.New("boom")
	h := outboxasynq.Handler(handle(func(ctx context.Context, e *outbox.Envelope) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return fail
	}), consume.WithTracerProvider(tp), consume.WithLogger(testLogger(t)))

	e := sampleEnvelope("ev-trace", "q")
	e.Attempt = 3
	e.Headers = map[string]string{"traceparent": traceparent(emitter), "tracestate": "vendor=abc"}
	if err := h.ProcessTask(t.Context(), taskOf(t, e)); !errors.Is(err, fail) {
		t.Fatalf("got %v", err)
	}
	spans := sr.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d ended spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != "outbox consume order.created" || s.SpanKind() != trace.SpanKindConsumer || s.InstrumentationScope().Name != "github.com/gormoutbox/outbox/consume" {
		t.Errorf("span %q kind %v scope %q", s.Name(), s.SpanKind(), s.InstrumentationScope().Name)
	}
	if p := s.Parent(); p.TraceID() != emitter.TraceID() || p.SpanID() != emitter.SpanID() || !p.IsRemote() {
		t.Errorf("span parent %v, want the emitting span %v (remote)", p, emitter)
	}
	if s.SpanContext().TraceState().Get("vendor") != "abc" {
		t.Errorf("tracestate lost: %q", s.SpanContext().TraceState().String())
	}
	if inHandler.TraceID() != emitter.TraceID() || inHandler.SpanID() != s.SpanContext().SpanID() {
		t.Errorf("the handler's context carries %v, want the consumer span %v", inHandler, s.SpanContext())
	}
	if attr(s, "cloudevents.event_id").AsString() != e.ID || attr(s, "cloudevents.event_type").AsString() != e.Type ||
		attr(s, "outbox.event.attempt").AsInt64() != 3 || attr(s, "messaging.system").AsString() != "asynq" {
		t.Errorf("attributes %v", s.Attributes())
	}
	if s.Status().Code != codes.Error || len(s.Events()) != 1 || s.Events()[0].Name != "exception" {
		t.Errorf("status %v, events %v: the failure is not recorded", s.Status(), s.Events())
	}
}

func TestHandlerReadsTraceFromTaskHeadersWithTheGlobalProvider(t *testing.T) {
	var inHandler trace.SpanContext
	h := outboxasynq.Handler(handle(func(ctx context.Context, e *outbox.Envelope) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return nil
	}))
	e := sampleEnvelope("ev-trace-2", "q")
	e.Headers = nil
	b, err := json.Marshal(e)
	must(t, err)
	task := asynq.NewTaskWithHeaders(e.Type, b, map[string]string{"traceparent": traceparent(emitter)})
	must(t, h.ProcessTask(t.Context(), task))
	if inHandler.TraceID() != emitter.TraceID() {
		t.Errorf("trace %v not restored from the task headers (got %v)", emitter.TraceID(), inHandler)
	}
}

// Through the real pieces: Emit under a span, a relay that traces, Redis,
// an asynq server. Permanent failures and malformed tasks are archived
// without a retry; the consumer span is a child of the relay's delivery
// span, itself a child of the emitting span.
func TestHandlerOnAnAsynqServer(t *testing.T) {
	addr := testenv.RedisAddr(t)
	q := newQueue(t, addr)
	ins := newInspector(t, addr)
	client := newClient(t, addr)
	db, _ := setupDB(t, testenv.Open(t, testenv.SQLite))
	tp, sr := newTracer(t)

	ctx, emit := tp.Tracer("test").Start(t.Context(), "place order")
	must(t, db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx,
			outbox.Event{ID: "ok", Type: "t.ok", Topic: q},
			outbox.Event{ID: "perm", Type: "t.perm", Topic: q})
	}))
	emit.End()
	r, err := relay.New(db, outboxasynq.NewPublisher(client), relay.WithLogger(testLogger(t)), relay.WithTracerProvider(tp))
	must(t, err)
	res, err := r.RunOnce(t.Context())
	must(t, err)
	if res.Published != 2 {
		t.Fatalf("relay %+v", res)
	}
	_, err = client.Enqueue(asynq.NewTask("t.ok", []byte("garbage")), asynq.Queue(q), asynq.TaskID("garbage"))
	must(t, err)

	calls := &counters{}
	mux := asynq.NewServeMux()
	h := func(ret error) asynq.Handler {
		return outboxasynq.Handler(handle(func(ctx context.Context, e *outbox.Envelope) error {
			calls.inc(e.ID)
			return ret
		}), consume.WithTracerProvider(tp), consume.WithLogger(testLogger(t)))
	}
	mux.Handle("t.ok", h(nil))
	mux.Handle("t.perm", h(outbox.Permanent(errors.New("cannot ever work"))))
	startServer(t, addr, q, 2, mux)

	waitFor(t, 15*time.Second, "the tasks to settle", func() bool {
		qi, err := ins.GetQueueInfo(q)
		return err == nil && qi.Completed == 1 && qi.Archived == 2
	})
	for _, id := range []string{"perm", "garbage"} {
		info, err := ins.GetTaskInfo(q, id)
		must(t, err)
		if info.State != asynq.TaskStateArchived || info.Retried != 0 {
			t.Errorf("task %s: %v after %d retries, want archived without retry", id, info.State, info.Retried)
		}
	}
	if calls.get("ok") != 1 || calls.get("perm") != 1 || calls.total() != 2 {
		t.Errorf("handler calls ok=%d perm=%d total=%d", calls.get("ok"), calls.get("perm"), calls.total())
	}

	spans := sr.Ended()
	for _, typ := range []string{"t.ok", "t.perm"} {
		consume := spanNamed(t, spans, "outbox consume "+typ)
		publish := spanNamed(t, spans, "outbox publish "+typ)
		if consume.SpanContext().TraceID() != emit.SpanContext().TraceID() {
			t.Errorf("%s: consumed in trace %v, emitted in %v", typ, consume.SpanContext().TraceID(), emit.SpanContext().TraceID())
		}
		if consume.Parent().SpanID() != publish.SpanContext().SpanID() || publish.Parent().SpanID() != emit.SpanContext().SpanID() {
			t.Errorf("%s: consume's parent %v, publish %v (parent %v), emit %v", typ,
				consume.Parent().SpanID(), publish.SpanContext().SpanID(), publish.Parent().SpanID(), emit.SpanContext().SpanID())
		}
		if attr(consume, "messaging.destination.name").AsString() != q {
			t.Errorf("%s: queue attribute %q", typ, attr(consume, "messaging.destination.name").AsString())
		}
	}
	if s := spanNamed(t, spans, "outbox consume t.perm"); s.Status().Code != codes.Error {
		t.Errorf("the permanent failure's span has status %v", s.Status())
	}
}

func TestHandlerPanicsOnMisuse(t *testing.T) {
	ok := handle(func(context.Context, *outbox.Envelope) error { return nil })
	for name, f := range map[string]func(){
		"nil handler":  func() { outboxasynq.Handler(nil) },
		"nil provider": func() { outboxasynq.Handler(ok, consume.WithTracerProvider(nil)) },
		"nil logger":   func() { outboxasynq.Handler(ok, consume.WithLogger(nil)) },
		"nil store":    func() { outboxasynq.Handler(consume.Idempotent(nil, "n", ok)) },
		"foreign option": func() {
			outboxasynq.Handler(ok, consume.TransportOption("other.WithX", func(*int) error { return nil }))
		},
	} {
		func() {
			defer func() {
				if err, _ := recover().(error); !errors.Is(err, consume.ErrInvalidOption) {
					t.Errorf("%s: panicked with %v, want an error wrapping consume.ErrInvalidOption", name, err)
				}
			}()
			f()
		}()
	}
}
