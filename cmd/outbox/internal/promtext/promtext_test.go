package promtext

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func TestName(t *testing.T) {
	cases := []struct {
		name, unit     string
		counter, gauge bool
		want           string
	}{
		{"outbox.events.claimed", "{event}", true, false, "outbox_events_claimed_total"},
		{"outbox.publish.duration", "s", false, false, "outbox_publish_duration_seconds"},
		{"outbox.events.oldest_pending_age", "s", false, true, "outbox_events_oldest_pending_age_seconds"},
		{"outbox.events.pending", "{event}", false, true, "outbox_events_pending"},
		{"cpu.utilization", "1", false, true, "cpu_utilization_ratio"},
		{"http.server.request.size", "By", false, false, "http_server_request_size_bytes"},
		{"net.io", "By/s", true, false, "net_io_bytes_per_second_total"},
		{"requests_total", "", true, false, "requests_total"},
		{"latency-seconds", "s", false, false, "latency_seconds"},
		{"9lives..x", "", false, true, "_9lives_x"},
	}
	for _, c := range cases {
		if got := Name(c.name, c.unit, c.counter, c.gauge); got != c.want {
			t.Errorf("Name(%q, %q) = %q, want %q", c.name, c.unit, got, c.want)
		}
	}
	if got := LabelName("outbox.event.type"); got != "outbox_event_type" {
		t.Errorf("LabelName = %q", got)
	}
}

// What an SDK records comes out in the text format, cumulative buckets
// and escapes included.
func TestWrite(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	m := mp.Meter("test")
	ctx := context.Background()
	c, _ := m.Int64Counter("outbox.events.published", metric.WithUnit("{event}"), metric.WithDescription("Events\\published.\nTwo lines."))
	attrs := metric.WithAttributes(attribute.String("outbox.table", `we"ird\`), attribute.String("outbox.event.type", "a.b"))
	c.Add(ctx, 3, attrs)
	c.Add(ctx, 2, attrs)
	h, _ := m.Float64Histogram("outbox.publish.duration", metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(0.1, 1))
	for _, v := range []float64{0.05, 0.5, 0.7, 5} {
		h.Record(ctx, v)
	}
	g, _ := m.Float64ObservableGauge("outbox.events.oldest_pending_age", metric.WithUnit("s"))
	_, _ = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveFloat64(g, 1.5)
		return nil
	}, g)
	ud, _ := m.Int64UpDownCounter("queue.depth")
	ud.Add(ctx, -4)

	var buf bytes.Buffer
	if err := Collect(ctx, &buf, reader); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`# HELP outbox_events_published_total Events\\published.\nTwo lines.`,
		`# TYPE outbox_events_published_total counter`,
		`outbox_events_published_total{outbox_event_type="a.b",outbox_table="we\"ird\\"} 5`,
		`# TYPE outbox_publish_duration_seconds histogram`,
		`outbox_publish_duration_seconds_bucket{le="0.1"} 1`,
		`outbox_publish_duration_seconds_bucket{le="1"} 3`,
		`outbox_publish_duration_seconds_bucket{le="+Inf"} 4`,
		`outbox_publish_duration_seconds_sum 6.25`,
		`outbox_publish_duration_seconds_count 4`,
		`# TYPE outbox_events_oldest_pending_age_seconds gauge`,
		`outbox_events_oldest_pending_age_seconds 1.5`,
		`# TYPE queue_depth gauge`,
		`queue_depth -4`,
	}
	got := buf.String()
	for _, w := range want {
		if !strings.Contains(got, w+"\n") {
			t.Errorf("missing line %s\n---\n%s", w, got)
		}
	}
}
