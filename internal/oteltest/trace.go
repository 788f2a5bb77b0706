package oteltest

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"reflect"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// TracerProvider is a trace.TracerProvider that samples and keeps every
// span it starts. The zero value is not usable: use NewTracerProvider.
type TracerProvider struct {
	embedded.TracerProvider
	mu    sync.Mutex
	ended []*Span
}

// NewTracerProvider returns a TracerProvider without spans.
func NewTracerProvider() *TracerProvider { return &TracerProvider{} }

// Tracer implements trace.TracerProvider.
func (p *TracerProvider) Tracer(name string, _ ...trace.TracerOption) trace.Tracer {
	return &tracer{p: p, scope: name}
}

// Ended returns the spans ended so far, in the order they ended.
func (p *TracerProvider) Ended() []*Span {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*Span(nil), p.ended...)
}

type tracer struct {
	embedded.Tracer
	p     *TracerProvider
	scope string
}

// Start implements trace.Tracer: the span is a child of ctx's span (local
// or remote) unless WithNewRoot is given, and is sampled.
func (t *tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	tid := parent.TraceID()
	if !parent.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64()|1)
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	var sid trace.SpanID
	binary.BigEndian.PutUint64(sid[:], rand.Uint64()|1)
	kind := cfg.SpanKind()
	if kind == trace.SpanKindUnspecified {
		kind = trace.SpanKindInternal // as the SDK does
	}
	s := &Span{
		tp: t.p, scope: t.scope, name: name, kind: kind, parent: parent,
		sc:    trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}),
		attrs: append([]attribute.KeyValue(nil), cfg.Attributes()...), links: append([]trace.Link(nil), cfg.Links()...),
		start: cfg.Timestamp(),
	}
	if s.start.IsZero() {
		s.start = time.Now()
	}
	return trace.ContextWithSpan(ctx, s), s
}

// Status is a span's status.
type Status struct {
	Code        codes.Code
	Description string
}

// Event is an event recorded on a span (RecordError records one named
// "exception", as the SDK does).
type Event struct {
	Name       string
	Attributes []attribute.KeyValue
}

// Span is a recorded span. Its methods are safe for concurrent use.
type Span struct {
	embedded.Span
	tp         *TracerProvider
	scope      string
	mu         sync.Mutex
	name       string
	kind       trace.SpanKind
	sc, parent trace.SpanContext
	attrs      []attribute.KeyValue
	links      []trace.Link
	events     []Event
	status     Status
	start, end time.Time
}

// Name is the span's name.
func (s *Span) Name() string { s.mu.Lock(); defer s.mu.Unlock(); return s.name }

// Scope is the name of the tracer that started the span.
func (s *Span) Scope() string { return s.scope }

// Kind is the span's kind (Internal when none was given).
func (s *Span) Kind() trace.SpanKind { return s.kind }

// Parent is the span context the span was started under (invalid for a
// root span).
func (s *Span) Parent() trace.SpanContext { return s.parent }

// Attributes are the span's attributes, in the order they were set (a key
// set again is replaced in place).
func (s *Span) Attributes() []attribute.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]attribute.KeyValue(nil), s.attrs...)
}

// Attr is the value of the attribute key, or an empty value.
func (s *Span) Attr(key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// Links are the span's links.
func (s *Span) Links() []trace.Link {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]trace.Link(nil), s.links...)
}

// Events are the span's events.
func (s *Span) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}

// Status is the span's status.
func (s *Span) Status() Status { s.mu.Lock(); defer s.mu.Unlock(); return s.status }

// Ended reports whether End was called.
func (s *Span) Ended() bool { s.mu.Lock(); defer s.mu.Unlock(); return !s.end.IsZero() }

// End implements trace.Span; only the first call counts.
func (s *Span) End(opts ...trace.SpanEndOption) {
	s.mu.Lock()
	if !s.end.IsZero() {
		s.mu.Unlock()
		return
	}
	cfg := trace.NewSpanEndConfig(opts...)
	s.end = cfg.Timestamp()
	if s.end.IsZero() {
		s.end = time.Now()
	}
	s.mu.Unlock()
	s.tp.mu.Lock()
	defer s.tp.mu.Unlock()
	s.tp.ended = append(s.tp.ended, s)
}

// recording reports whether the span takes changes (it has not ended);
// s.mu is held.
func (s *Span) recording() bool { return s.end.IsZero() }

// AddEvent implements trace.Span.
func (s *Span) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recording() {
		s.events = append(s.events, Event{Name: name, Attributes: cfg.Attributes()})
	}
}

// AddLink implements trace.Span.
func (s *Span) AddLink(l trace.Link) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recording() && l.SpanContext.IsValid() {
		s.links = append(s.links, l)
	}
}

// IsRecording implements trace.Span: true until End.
func (s *Span) IsRecording() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.recording() }

// RecordError implements trace.Span: an "exception" event with the
// error's type and message, as the SDK records it; a nil error is ignored.
func (s *Span) RecordError(err error, opts ...trace.EventOption) {
	if err == nil {
		return
	}
	opts = append(opts, trace.WithAttributes(
		attribute.String("exception.type", reflect.TypeOf(err).String()),
		attribute.String("exception.message", err.Error())))
	s.AddEvent("exception", opts...)
}

// SpanContext implements trace.Span.
func (s *Span) SpanContext() trace.SpanContext { return s.sc }

// SetStatus implements trace.Span with the SDK's rules: Unset is ignored,
// Ok is final, a description is kept for Error only.
func (s *Span) SetStatus(code codes.Code, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recording() || code == codes.Unset || s.status.Code == codes.Ok {
		return
	}
	if code != codes.Error {
		description = ""
	}
	s.status = Status{Code: code, Description: description}
}

// SetName implements trace.Span.
func (s *Span) SetName(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recording() {
		s.name = name
	}
}

// SetAttributes implements trace.Span.
func (s *Span) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.recording() {
		return
	}
next:
	for _, a := range kv {
		for i := range s.attrs {
			if s.attrs[i].Key == a.Key {
				s.attrs[i] = a
				continue next
			}
		}
		s.attrs = append(s.attrs, a)
	}
}

// TracerProvider implements trace.Span.
func (s *Span) TracerProvider() trace.TracerProvider { return s.tp }
