// Package outboxprom serves the outbox's OpenTelemetry metrics on a
// Prometheus endpoint, for a worker of your own (the CLI's `outbox relay
// --metrics-addr` does the same for its relay):
//
//	metrics, err := outboxprom.Listen(":9464") // GET /metrics, until Shutdown
//	defer metrics.Shutdown(context.Background())
//	r, err := relay.New(db, pub, metrics.RelayOption())
//	c, err := outboxredis.NewConsumer(rdb, stream, group, name, h, metrics.ConsumerOption()) // any broker's consumer
//
// New gives the same without a server of its own: a Metrics is an
// http.Handler to mount on the application's mux, and its MeterProvider
// is an OpenTelemetry metric.MeterProvider for anything else that takes
// one.
//
// The instruments are read when Prometheus scrapes, through the
// OpenTelemetry Prometheus exporter (go.opentelemetry.io/otel/exporters/prometheus),
// and named the OpenTelemetry-to-Prometheus way: the relay's counters
// outbox_events_claimed_total, outbox_events_published_total,
// outbox_events_failed_total, outbox_events_dead_total,
// outbox_events_released_total, outbox_events_rescued_total and
// outbox_leases_lost_total (labels
// outbox_table and outbox_event_type), the histograms
// outbox_publish_duration_seconds and outbox_event_lag_seconds, and the
// gauges outbox_events_pending and outbox_events_oldest_pending_age_seconds,
// read from the table at each scrape while a relay runs. Consumers given
// ConsumerOption add outbox_consumer_messages_total (labels
// messaging_system, messaging_destination_name and outbox_outcome: acked,
// retried, released, dead) and the histogram
// outbox_consumer_handle_duration_seconds.
//
// By default the page shows a Prometheus registry of its own, with the Go
// runtime's and the process's collectors (go_*, process_*) beside the
// outbox's series; WithRegistry registers the outbox's series in the
// application's registry instead and serves that one, so that one
// endpoint shows both. Nothing global is set: two Metrics in one process
// do not meet.
//
// It is a module of its own (github.com/gormoutbox/outbox/outboxprom), so
// that the Prometheus client reaches only the applications that import it.
package outboxprom
