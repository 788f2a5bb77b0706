package outboxprom_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/outboxprom"
	"github.com/gormoutbox/outbox/outboxtest"
	"github.com/gormoutbox/outbox/relay"
)

// A worker's relay metrics on a Prometheus endpoint: three lines.
func ExampleListen() {
	db := exampleDB() // the application's database, with the outbox

	metrics, err := outboxprom.Listen("127.0.0.1:0") // serves /metrics; port 0: a free one
	if err != nil {
		log.Fatal(err)
	}
	defer metrics.Shutdown(context.Background())
	r, err := relay.New(db, publisher, metrics.RelayOption())
	if err != nil {
		log.Fatal(err)
	}

	_, _ = r.RunOnce(context.Background()) // in a worker: r.Start(ctx)
	fmt.Print(scrapeOutbox("http://" + metrics.Addr() + "/metrics"))
	// Output:
	// outbox_events_claimed_total{otel_scope_name="github.com/gormoutbox/outbox/relay",otel_scope_schema_url="",otel_scope_version="",outbox_table="outbox_events"} 1
	// outbox_events_published_total{otel_scope_name="github.com/gormoutbox/outbox/relay",otel_scope_schema_url="",otel_scope_version="",outbox_event_type="invoice.issued",outbox_table="outbox_events"} 1
}

// The metrics on the application's own HTTP mux, and its meter provider
// for anything else that takes one.
func ExampleNew() {
	metrics, err := outboxprom.New()
	if err != nil {
		log.Fatal(err)
	}
	defer metrics.Shutdown(context.Background())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)

	_, _ = relay.New(exampleDB(), publisher, relay.WithMeterProvider(metrics.MeterProvider()))
	// ... http.ListenAndServe(addr, mux)
}

// publisher stands for a broker adapter's.
var publisher = relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil })

// exampleDB is a database with the outbox and one event, as a worker's
// would be.
func exampleDB() *gorm.DB {
	db := outboxtest.DB(&testing.T{})
	_ = db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{Type: "invoice.issued", AggregateID: "1"})
	})
	return db
}

// scrapeOutbox GETs url and returns its outbox counters' lines.
func scrapeOutbox(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var out strings.Builder
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "outbox_events_") && strings.Contains(l, "_total{") {
			fmt.Fprintln(&out, l)
		}
	}
	return out.String()
}
