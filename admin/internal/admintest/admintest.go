// Package admintest holds the events the admin page's tests show: those of
// package admin and the browser tests, a module of their own
// (admin/browsertest) so that the browser driver stays out of the core
// module's go.mod.
package admintest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// Secret is in every payload Seed writes: no list page and no log may show
// it.
const Secret = "s3cret-card-4242"

// Seed writes 20 events and runs a relay over them once: dead-1 and
// dead-2 die, fail-1 (the head of key customer:42, with two events behind
// it) fails and waits an hour, and the rest are published; a relay
// "seeder" logs the attempts.
func Seed(t testing.TB, db *gorm.DB) {
	t.Helper()
	testenv.Emit(t, db, 20, func(i int) outbox.Event {
		e := outbox.Event{ID: fmt.Sprintf("ev-%02d", i), Type: []string{"order.created", "invoice.issued"}[i%2], Topic: "orders",
			AggregateType: "order", AggregateID: fmt.Sprint(i), TenantID: "acme",
			Payload: map[string]any{"card": Secret, "n": i}, Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
		switch i {
		case 3, 4:
			e.ID = fmt.Sprintf("dead-%d", i-2)
		case 10:
			e.ID, e.PartitionKey = "fail-1", "customer:42"
		case 11, 12:
			e.PartitionKey = "customer:42"
		}
		return e
	})
	pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
		switch {
		case strings.HasPrefix(e.ID, "dead-"):
			return outbox.Permanent(errors.New("schema mismatch: field total missing"))
		case e.ID == "fail-1":
			return errors.New("broker timeout")
		}
		return nil
	})
	r, err := relay.New(db, pub, relay.WithLogger(slog.New(slog.DiscardHandler)), relay.WithBackoff(func(int) time.Duration { return time.Hour }),
		relay.WithAttemptLog(), relay.WithWorkerID("seeder"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
}
