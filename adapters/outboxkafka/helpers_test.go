package outboxkafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger logs to the test output with OUTBOX_TEST_LOG=1, else nowhere.
func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// newPublisher returns a Publisher on cl with the test logger, and opts.
func newPublisher(t testing.TB, cl *kgo.Client, opts ...outboxkafka.Option) *outboxkafka.Publisher {
	t.Helper()
	p, err := outboxkafka.NewPublisher(cl, append([]outboxkafka.Option{outboxkafka.WithLogger(testLogger(t))}, opts...)...)
	must(t, err)
	return p
}

// envelope is an event as the relay hands it over.
func envelope(id, topic, key string) *outbox.Envelope {
	return &outbox.Envelope{
		ID: id, Type: "order.created", Topic: topic, AggregateType: "order", AggregateID: "agg-" + id,
		PartitionKey: key, Attempt: 1, Payload: []byte(`{"id":"` + id + `"}`),
		Headers:   map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC),
	}
}

// eventually waits up to d for cond, checking every 10ms.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// outboxDB opens a database of the dialect with the plugin, the outbox,
// an idempotency store and the effects table.
func outboxDB(t testing.TB, dialect string) (*gorm.DB, *idempotency.Store) {
	t.Helper()
	return setupDB(t, testenv.Open(t, dialect))
}

func setupDB(t testing.TB, db *gorm.DB) (*gorm.DB, *idempotency.Store) {
	t.Helper()
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	store, err := idempotency.NewStore(db)
	must(t, err)
	must(t, store.Migrate(context.Background()))
	must(t, db.AutoMigrate(&effect{}))
	return db, store
}

// newRelay builds a relay with test settings.
func newRelay(t testing.TB, db *gorm.DB, pub relay.Publisher, opts ...relay.Option) *relay.Relay {
	t.Helper()
	base := []relay.Option{relay.WithLogger(testLogger(t)), relay.WithBackoff(func(int) time.Duration { return 0 }),
		relay.WithPollInterval(20 * time.Millisecond)}
	r, err := relay.New(db, pub, append(base, opts...)...)
	must(t, err)
	return r
}

// startRelay runs r.Start until t ends (or the returned stop is called).
func startRelay(t testing.TB, r *relay.Relay) (stop func()) { return runUntil(t, "relay", r.Start) }

// runUntil runs fn (a relay's Start, a consumer's Run) until t ends or the
// returned stop is called, and checks that it returns nil within 30s of
// its context ending.
func runUntil(t testing.TB, what string, fn func(ctx context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s returned %v, want nil", what, err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("%s did not return within 30s of its context ending", what)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func countStatus(t testing.TB, db *gorm.DB, s outbox.Status) int64 {
	t.Helper()
	var n int64
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", string(s)).Count(&n).Error)
	return n
}

// keys is how many partition keys emitKeyed spreads its events over.
const keys = 16

// emitKeyed writes n events to topic, numbered from 0, event i with the
// partition key "key-<i mod keys>" and its number in the payload.
func emitKeyed(t testing.TB, db *gorm.DB, n int, topic string) {
	t.Helper()
	emitKeyedFrom(t, db, 0, n, topic)
}

// emitKeyedFrom is emitKeyed of the events numbered from from.
func emitKeyedFrom(t testing.TB, db *gorm.DB, from, n int, topic string) {
	t.Helper()
	emitKeyedWith(t, db, n, topic, func(i int) any { return map[string]int{"i": from + i} }, from)
}

// emitKeyedWith is emitKeyed with the payloads of payload, numbered from
// from (0 if not given).
func emitKeyedWith(t testing.TB, db *gorm.DB, n int, topic string, payload func(i int) any, from ...int) {
	t.Helper()
	first := 0
	if len(from) > 0 {
		first = from[0]
	}
	testenv.Emit(t, db, n, func(i int) outbox.Event {
		i += first
		return outbox.Event{
			ID: eventID(i), Type: "order.created", Topic: topic, PartitionKey: fmt.Sprint("key-", i%keys),
			AggregateType: "order", AggregateID: fmt.Sprint(i), Payload: payload(i),
		}
	})
}

func eventID(i int) string { return fmt.Sprintf("ev-%06d", i) }

// attemptsSpent returns the highest attempts count of the outbox.
func attemptsSpent(t testing.TB, db *gorm.DB) int {
	t.Helper()
	var most int
	must(t, db.Model(&outbox.OutboxEvent{}).Select("COALESCE(MAX(attempts), 0)").Scan(&most).Error)
	return most
}
