package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/oteltest"
	"github.com/gormoutbox/outbox/relay"
)

// metricsOf collects every metric of mp by name.
func metricsOf(t *testing.T, mp *oteltest.MeterProvider) oteltest.Metrics {
	t.Helper()
	m, err := mp.Collect(context.Background())
	must(t, err)
	return m
}

func sum(t *testing.T, m oteltest.Metric) int64 {
	t.Helper()
	if m.Kind == "" {
		t.Fatal("a counter was not recorded")
	}
	if m.Kind != "Int64Counter" {
		t.Fatalf("%s is a %q, not an int64 counter", m.Name, m.Kind)
	}
	return int64(m.Total())
}

// observed reports whether m is a metric of the kind with observations.
func observed(m oteltest.Metric, kind oteltest.Kind) bool {
	return m.Kind == kind && len(m.Points) > 0 && m.Points[0].Count > 0
}

func TestMetrics(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 10, event)
		mp := oteltest.NewMeterProvider()
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			switch e.ID {
			case "ev-000001":
				return errFlaky
			case "ev-000002":
				return outbox.Permanent(errFlaky)
			}
			return nil
		})
		r := newRelay(t, db, pub, relay.WithMeterProvider(mp))
		_, err := r.RunOnce(t.Context())
		must(t, err)

		// A lost lease: claim, expire, let another relay rescue and deliver.
		emitN(t, db, 1, func(int) outbox.Event { return outbox.Event{ID: "lost", Type: "t"} })
		block := make(chan struct{})
		stale := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { <-block; return nil }),
			relay.WithMeterProvider(mp), relay.WithWorkerID("stale"))
		done := make(chan struct{})
		go func() { _, _ = stale.RunOnce(context.Background()); close(done) }()
		for statusOf(t, db, "lost").Status != outbox.StatusPublishing {
			time.Sleep(5 * time.Millisecond)
		}
		must(t, db.Exec("UPDATE outbox_events SET locked_until = ? WHERE event_id = 'lost'", past(db)).Error)
		must(t, db.Exec("UPDATE outbox_events SET available_at = ? WHERE event_id = 'ev-000001'", past(db)).Error)
		_, err = newRelay(t, db, newRecorder(), relay.WithMeterProvider(mp)).RunOnce(t.Context())
		must(t, err)
		close(block)
		<-done

		m := metricsOf(t, mp)
		for name, want := range map[string]int64{
			"outbox.events.claimed": 10 + 1 + 2, "outbox.events.published": 8 + 2, "outbox.events.failed": 1,
			"outbox.events.rescued": 1, "outbox.events.dead": 1, "outbox.leases.lost": 1,
		} {
			if got := sum(t, m[name]); got != want {
				t.Errorf("%s = %d, want %d", name, got, want)
			}
		}
		for _, name := range []string{"outbox.publish.duration", "outbox.event.lag"} {
			if !observed(m[name], "Float64Histogram") {
				t.Errorf("%s has no observations: %+v", name, m[name])
			}
		}
		if _, ok := m["outbox.events.pending"]; ok {
			t.Errorf("table gauges reported although no relay runs")
		}

		// The table gauges are observed while a relay runs.
		emitN(t, db, 3, func(i int) outbox.Event {
			return outbox.Event{ID: fmt.Sprint("later-", i), Type: "t", AvailableAt: time.Now().Add(time.Hour)}
		})
		ctx, cancel := context.WithCancel(t.Context())
		running := make(chan error, 1)
		go func() { running <- newRelay(t, db, newRecorder(), relay.WithMeterProvider(mp)).Start(ctx) }()
		var pending oteltest.Metric
		for deadline := time.Now().Add(10 * time.Second); len(pending.Points) == 0; {
			if time.Now().After(deadline) {
				t.Fatal("no pending gauge while the relay runs")
			}
			time.Sleep(20 * time.Millisecond)
			pending = metricsOf(t, mp)["outbox.events.pending"]
		}
		if pending.Kind != "Int64ObservableGauge" || pending.Points[0].Value != 3 {
			t.Errorf("pending gauge = %v (a %q), want the 3 scheduled events", pending.Points[0].Value, pending.Kind)
		}
		if !observed(metricsOf(t, mp)["outbox.events.oldest_pending_age"], "Float64ObservableGauge") {
			t.Errorf("no oldest pending age gauge")
		}
		cancel()
		must(t, <-running)
		if _, ok := metricsOf(t, mp)["outbox.events.pending"]; ok {
			t.Errorf("table gauges still reported after the relay stopped")
		}
	})
}

func TestTraces(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		tp := oteltest.NewTracerProvider()
		// The application emits inside a span of its own.
		ctx, emitSpan := tp.Tracer("app").Start(context.Background(), "place order")
		must(t, db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{ID: "traced", Type: "order.placed"})
		}))
		emitSpan.End()
		emitN(t, db, 1, func(int) outbox.Event { return outbox.Event{ID: "untraced", Type: "order.placed"} })

		var seen []trace.SpanContext
		pub := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
			seen = append(seen, trace.SpanContextFromContext(ctx))
			if e.ID == "untraced" {
				return errors.New("fails")
			}
			return nil
		})
		_, err := newRelay(t, db, pub, relay.WithTracerProvider(tp), relay.WithWorkerID("r1"), relay.WithConcurrency(1)).RunOnce(t.Context())
		must(t, err)

		var batch, traced, untraced *oteltest.Span
		for _, s := range tp.Ended() {
			switch {
			case s.Name() == "outbox.relay batch":
				batch = s
			case s.Name() == "outbox publish order.placed" && s.Attr("cloudevents.event_id").AsString() == "traced":
				traced = s
			case s.Name() == "outbox publish order.placed":
				untraced = s
			}
		}
		if batch == nil || traced == nil || untraced == nil {
			t.Fatalf("spans: %v", tp.Ended())
		}
		if traced.Parent().SpanID() != emitSpan.SpanContext().SpanID() || traced.SpanContext().TraceID() != emitSpan.SpanContext().TraceID() {
			t.Errorf("the delivery span is not a child of the emitting span")
		}
		if len(traced.Links()) != 1 || traced.Links()[0].SpanContext.SpanID() != batch.SpanContext().SpanID() {
			t.Errorf("the delivery span is not linked to its batch")
		}
		if untraced.Parent().SpanID() != batch.SpanContext().SpanID() {
			t.Errorf("a delivery without a traceparent is not a child of its batch")
		}
		if traced.Attr("cloudevents.event_type").AsString() != "order.placed" || traced.Attr("outbox.relay.id").AsString() != "r1" || traced.Attr("outbox.event.attempt").AsInt64() != 1 {
			t.Errorf("attributes %v", traced.Attributes())
		}
		if untraced.Status().Code.String() != "Error" {
			t.Errorf("a failed delivery's span status is %v", untraced.Status())
		}
		// The publisher runs inside the delivery span, which consumers continue.
		if len(seen) != 2 || !(seen[0].SpanID() == traced.SpanContext().SpanID() || seen[1].SpanID() == traced.SpanContext().SpanID()) {
			t.Errorf("the publisher's context does not carry the delivery span")
		}
	})
}

func TestHeartbeats(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 5, event)
		ctx, cancel := context.WithCancel(t.Context())
		r := newRelay(t, db, newRecorder(), relay.WithWorkerID("beating"), relay.WithHeartbeat(100*time.Millisecond))
		done := make(chan error, 1)
		go func() { done <- r.Start(ctx) }()

		// A relay that died a while ago.
		must(t, db.Exec(`INSERT INTO outbox_events_relays (id, host, pid, heartbeat_ms, started_at, last_beat) VALUES ('ghost', 'h', 1, 1000, ?, ?)`, past(db), past(db)).Error)

		var live *relay.RelayStatus
		deadline := time.Now().Add(10 * time.Second)
		for live == nil || live.Published < 5 {
			if time.Now().After(deadline) {
				t.Fatalf("no heartbeat with the relay's counts: %+v", live)
			}
			time.Sleep(50 * time.Millisecond)
			s, err := inspector(t, db).GetStats(t.Context())
			must(t, err)
			for i := range s.Relays {
				if s.Relays[i].ID == "beating" {
					live = &s.Relays[i]
				}
			}
		}
		s, err := inspector(t, db).GetStats(t.Context())
		must(t, err)
		if len(s.Relays) != 2 || !s.Relays[0].Live || s.Relays[1].Live || s.Relays[1].ID != "ghost" {
			t.Errorf("relays %+v, want beating live and ghost stale", s.Relays)
		}
		cancel()
		must(t, <-done)
		s, err = inspector(t, db).GetStats(t.Context())
		must(t, err)
		if len(s.Relays) != 1 || s.Relays[0].ID != "ghost" {
			t.Errorf("after a clean stop: %+v, want only the ghost", s.Relays)
		}
	})
}
