package oteltest_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox/internal/oteltest"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func collect(t *testing.T, mp *oteltest.MeterProvider) oteltest.Metrics {
	t.Helper()
	m, err := mp.Collect(context.Background())
	must(t, err)
	return m
}

func TestSynchronousInstruments(t *testing.T) {
	ctx := context.Background()
	mp := oteltest.NewMeterProvider()
	m := mp.Meter("scope")
	c, err := m.Int64Counter("requests", metric.WithUnit("{request}"), metric.WithDescription("d"))
	must(t, err)
	h, err := m.Float64Histogram("latency")
	must(t, err)
	g, err := m.Int64Gauge("depth")
	must(t, err)
	if _, err := m.Float64Counter("unused"); err != nil {
		t.Fatal(err)
	}
	a, b := metric.WithAttributes(attribute.String("k", "a")), metric.WithAttributes(attribute.String("k", "b"))
	c.Add(ctx, 2, a)
	c.Add(ctx, 3, b)
	c.Add(ctx, 5, a)
	h.Record(ctx, 0.5, a)
	h.Record(ctx, 1.5, a)
	g.Record(ctx, 7)
	g.Record(ctx, 4)

	got := collect(t, mp)
	if names := strings.Join(got.Names(), ","); names != "depth,latency,requests" {
		t.Fatalf("metrics %s: want the three that recorded, not the unused counter", names)
	}
	req := got["requests"]
	if req.Kind != "Int64Counter" || req.Unit != "{request}" || req.Description != "d" || req.Scope != "scope" {
		t.Errorf("requests: %+v", req)
	}
	if req.Total() != 10 || len(req.Points) != 2 || req.Points[0].Value != 7 || req.Points[0].Count != 2 || req.Points[1].Value != 3 {
		t.Errorf("requests points %+v, want a=7 (2 adds), b=3", req.Points)
	}
	if v, _ := req.Points[0].Attributes.Value("k"); v.AsString() != "a" {
		t.Errorf("first point's attributes %v", req.Points[0].Attributes)
	}
	if lat := got["latency"]; lat.Kind != "Float64Histogram" || len(lat.Points) != 1 || lat.Points[0].Count != 2 || lat.Points[0].Value != 2 {
		t.Errorf("latency %+v, want one set with 2 records summing to 2", lat)
	}
	if d := got["depth"]; len(d.Points) != 1 || d.Points[0].Value != 4 {
		t.Errorf("depth %+v, want the last value 4", d)
	}
	// Cumulative: a second collection still has them.
	if collect(t, mp)["requests"].Total() != 10 {
		t.Error("the counter restarted at the second collection")
	}
}

func TestObservableInstruments(t *testing.T) {
	mp := oteltest.NewMeterProvider()
	m := mp.Meter("scope")
	pending, err := m.Int64ObservableGauge("pending")
	must(t, err)
	age, err := m.Float64ObservableGauge("age")
	must(t, err)
	other, err := m.Int64ObservableCounter("other")
	must(t, err)
	if got := collect(t, mp); len(got) != 0 {
		t.Fatalf("observable instruments without a callback report %v", got.Names())
	}
	n := int64(0)
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		n++
		o.ObserveInt64(pending, n, metric.WithAttributes(attribute.String("table", "t")))
		o.ObserveFloat64(age, 1.5)
		return nil
	}, pending, age)
	must(t, err)
	collect(t, mp)
	got := collect(t, mp)
	if p := got["pending"]; p.Kind != "Int64ObservableGauge" || len(p.Points) != 1 || p.Points[0].Value != 2 || p.Points[0].Count != 1 {
		t.Errorf("pending %+v, want the second collection's observation only", p)
	}
	if got["age"].Points[0].Value != 1.5 {
		t.Errorf("age %+v", got["age"])
	}
	must(t, reg.Unregister())
	if got := collect(t, mp); len(got) != 0 {
		t.Errorf("gauges still reported after Unregister: %v", got.Names())
	}

	// An observation of an instrument not registered, and a callback's error.
	boom := errors.New("boom")
	bad, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(other, 1)
		return boom
	}, pending)
	must(t, err)
	got, err = mp.Collect(context.Background())
	if !errors.Is(err, boom) || err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("Collect error %v, want the callback's and the unregistered observation's", err)
	}
	if _, ok := got["other"]; ok {
		t.Error("an observation of an instrument the callback was not registered for was kept")
	}
	must(t, bad.Unregister())

	// An instrument's own callback.
	_, err = m.Int64ObservableUpDownCounter("own", metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(9)
		return nil
	}))
	must(t, err)
	if v := collect(t, mp)["own"]; len(v.Points) != 1 || v.Points[0].Value != 9 {
		t.Errorf("own %+v", v)
	}
}

func TestInstrumentsRefused(t *testing.T) {
	m := oteltest.NewMeterProvider().Meter("scope")
	for _, name := range []string{"", "1abc", "a b", strings.Repeat("x", 256)} {
		if _, err := m.Int64Counter(name); err == nil {
			t.Errorf("name %q accepted", name)
		}
	}
	if _, err := m.Int64Counter("x"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Float64Histogram("x"); err == nil {
		t.Error("a name reused by another kind was accepted")
	}
	if _, err := m.Int64Counter("x"); err != nil {
		t.Errorf("the same instrument again: %v", err)
	}
	if _, err := m.RegisterCallback(func(context.Context, metric.Observer) error { return nil }, nil); err == nil {
		t.Error("RegisterCallback took a foreign instrument")
	}
}

func TestSpans(t *testing.T) {
	tp := oteltest.NewTracerProvider()
	tr := tp.Tracer("app")
	ctx, root := tr.Start(context.Background(), "root", trace.WithAttributes(attribute.String("a", "1")))
	cctx, child := tr.Start(ctx, "child", trace.WithSpanKind(trace.SpanKindProducer), trace.WithLinks(trace.Link{SpanContext: root.SpanContext()}))
	if trace.SpanFromContext(cctx) != child {
		t.Error("the context does not carry the child span")
	}
	child.SetAttributes(attribute.String("b", "2"), attribute.String("b", "3"))
	child.RecordError(errors.New("failed"))
	child.SetStatus(codes.Error, "failed")
	child.SetStatus(codes.Unset, "")
	child.End()
	child.SetName("after end")
	root.SetStatus(codes.Ok, "")
	root.SetStatus(codes.Error, "ignored: Ok is final")
	root.End()
	root.End()

	// A remote parent, from a traceparent header.
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	rctx := propagation.TraceContext{}.Extract(context.Background(), carrier)
	_, remote := tr.Start(rctx, "remote")
	remote.End()
	_, fresh := tr.Start(ctx, "new root", trace.WithNewRoot())
	fresh.End()

	ended := tp.Ended()
	if len(ended) != 4 || ended[0] != child || ended[1] != root {
		t.Fatalf("ended %v, want child, root, remote, new root (root once)", ended)
	}
	c, r := ended[0], ended[1]
	if !root.SpanContext().IsValid() || !root.SpanContext().IsSampled() || r.Parent().IsValid() || r.Kind() != trace.SpanKindInternal {
		t.Errorf("root: context %v, parent %v, kind %v", root.SpanContext(), r.Parent(), r.Kind())
	}
	if c.Parent().SpanID() != root.SpanContext().SpanID() || c.SpanContext().TraceID() != root.SpanContext().TraceID() ||
		c.SpanContext().SpanID() == root.SpanContext().SpanID() {
		t.Error("the child is not a child of root in its trace")
	}
	if c.Name() != "child" || c.Kind() != trace.SpanKindProducer || c.Attr("b").AsString() != "3" || len(c.Attributes()) != 1 {
		t.Errorf("child %s %v %v", c.Name(), c.Kind(), c.Attributes())
	}
	if l := c.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != root.SpanContext().SpanID() {
		t.Errorf("links %v", l)
	}
	if c.Status() != (oteltest.Status{Code: codes.Error, Description: "failed"}) || r.Status().Code != codes.Ok {
		t.Errorf("statuses %v %v", c.Status(), r.Status())
	}
	if ev := c.Events(); len(ev) != 1 || ev[0].Name != "exception" || !sameAttrs(ev[0].Attributes,
		attribute.String("exception.type", "*errors.errorString"), attribute.String("exception.message", "failed")) {
		t.Errorf("events %v", ev)
	}
	if child.IsRecording() || !c.Ended() {
		t.Error("an ended span still records")
	}
	if p := ended[2].Parent(); !p.IsRemote() || p.SpanID() != root.SpanContext().SpanID() {
		t.Errorf("the remote child's parent %v", p)
	}
	if ended[3].Parent().IsValid() || ended[3].SpanContext().TraceID() == root.SpanContext().TraceID() {
		t.Error("WithNewRoot kept the parent")
	}
}

func sameAttrs(got []attribute.KeyValue, want ...attribute.KeyValue) bool {
	a, b := attribute.NewSet(got...), attribute.NewSet(want...)
	return a.Equals(&b)
}
