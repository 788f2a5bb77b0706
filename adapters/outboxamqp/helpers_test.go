package outboxamqp_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// urlEnv names the broker the tests use.
const urlEnv = "OUTBOX_AMQP_URL"

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger logs to the test output with OUTBOX_TEST_LOG=1, else nowhere.
func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// brokerURL returns OUTBOX_AMQP_URL, skipping (or failing, with
// OUTBOX_REQUIRE_SERVICES=1) without it.
func brokerURL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(urlEnv)
	if u == "" {
		testenv.Unavailable(t, urlEnv, "amqp://guest:guest@127.0.0.1:5672/")
	}
	return u
}

// dialURL opens a connection to u, closed when t ends.
func dialURL(t testing.TB, u string) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(u)
	if err != nil {
		t.Fatalf("dialling %s: %v (is RabbitMQ running?)", u, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// dial opens a connection to the test broker, closed when t ends.
func dial(t testing.TB) *amqp.Connection { return dialURL(t, brokerURL(t)) }

// viaProxy returns the URL of the test broker through proxy.
func viaProxy(t testing.TB, proxy *testenv.Proxy) string {
	t.Helper()
	u, err := amqp.ParseURI(brokerURL(t))
	must(t, err)
	return fmt.Sprintf("amqp://%s:%s@%s/%s", u.Username, u.Password, proxy.Addr(), u.Vhost)
}

// brokerAddr is host:port of the test broker.
func brokerAddr(t testing.TB) string {
	t.Helper()
	u, err := amqp.ParseURI(brokerURL(t))
	must(t, err)
	return fmt.Sprintf("%s:%d", u.Host, u.Port)
}

// admin opens a channel for declarations and inspection, closed when t ends.
func admin(t testing.TB) *amqp.Channel {
	t.Helper()
	ch, err := dial(t).Channel()
	must(t, err)
	return ch
}

// queue declares a durable queue with a unique name, deleted when t ends.
func queue(t testing.TB, prefix string, args amqp.Table) string {
	t.Helper()
	name := testenv.Name("oamqp-" + prefix)
	ch := admin(t)
	_, err := ch.QueueDeclare(name, true, false, false, false, args)
	must(t, err)
	t.Cleanup(func() { deleteQueue(t, name) })
	return name
}

// deleteQueue deletes a queue on a channel of its own (the test's may be
// closed by then).
func deleteQueue(t testing.TB, name string) {
	t.Helper()
	conn, err := amqp.Dial(brokerURL(t))
	if err != nil {
		t.Errorf("deleting queue %s: %v", name, err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	must(t, err)
	if _, err := ch.QueueDelete(name, false, false, false); err != nil {
		t.Errorf("deleting queue %s: %v", name, err)
	}
}

// exchange declares a durable exchange of kind with a unique name, deleted
// when t ends.
func exchange(t testing.TB, prefix, kind string) string {
	t.Helper()
	name := testenv.Name("oamqp-" + prefix)
	must(t, admin(t).ExchangeDeclare(name, kind, true, false, false, false, nil))
	t.Cleanup(func() {
		conn, err := amqp.Dial(brokerURL(t))
		if err != nil {
			t.Errorf("deleting exchange %s: %v", name, err)
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		must(t, err)
		if err := ch.ExchangeDelete(name, false, false); err != nil {
			t.Errorf("deleting exchange %s: %v", name, err)
		}
	})
	return name
}

// messages takes (and acknowledges) every message in q.
func messages(t testing.TB, q string) []amqp.Delivery {
	t.Helper()
	ch := admin(t)
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(q, true)
		must(t, err)
		if !ok {
			return out
		}
		out = append(out, d)
	}
}

// depth is the number of ready messages in q.
func depth(t testing.TB, q string) int {
	t.Helper()
	info, err := admin(t).QueueDeclarePassive(q, true, false, false, false, nil)
	must(t, err)
	return info.Messages
}

func newPublisher(t testing.TB, conn *amqp.Connection, opts ...outboxamqp.Option) *outboxamqp.Publisher {
	t.Helper()
	p, err := outboxamqp.NewPublisher(conn, append([]outboxamqp.Option{outboxamqp.WithLogger(testLogger(t))}, opts...)...)
	must(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func envelope(id, typ, topic string) *outbox.Envelope {
	return &outbox.Envelope{
		ID: id, Type: typ, Topic: topic, Attempt: 1,
		Payload:   []byte(`{"id":"` + id + `"}`),
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

// outboxDB opens a database of the dialect with the plugin, the outbox and
// an idempotency store.
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
	return db, store
}

// newRelay builds a relay with test settings.
func newRelay(t testing.TB, db *gorm.DB, pub relay.Publisher, opts ...relay.Option) *relay.Relay {
	t.Helper()
	base := []relay.Option{relay.WithLogger(testLogger(t)), relay.WithBackoff(func(int) time.Duration { return 0 })}
	r, err := relay.New(db, pub, append(base, opts...)...)
	must(t, err)
	return r
}

// startRelay runs r.Start until t ends (or the returned stop is called).
func startRelay(t testing.TB, r *relay.Relay) (stop func()) {
	t.Helper()
	return runUntilStopped(t, "relay", r.Start)
}

// runConsumer runs c.Run until t ends (or the returned stop is called).
func runConsumer(t testing.TB, c *consume.Consumer) (stop func()) {
	t.Helper()
	return runUntilStopped(t, "consumer", c.Run)
}

func runUntilStopped(t testing.TB, what string, run func(context.Context) error) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("%s returned %v, want nil", what, err)
				}
			case <-time.After(20 * time.Second):
				t.Errorf("%s did not return within 20s of its context ending", what)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// newConsumer makes a consumer of q with fast test settings.
func newConsumer(t testing.TB, conn *amqp.Connection, q string, h consume.Handler, opts ...consume.Option) *consume.Consumer {
	t.Helper()
	base := []consume.Option{consume.WithLogger(testLogger(t)), consume.WithRetryDelay(20 * time.Millisecond)}
	c, err := outboxamqp.NewConsumer(conn, q, h, append(base, opts...)...)
	must(t, err)
	return c
}

func countStatus(t testing.TB, db *gorm.DB, s outbox.Status) int64 {
	t.Helper()
	var n int64
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", string(s)).Count(&n).Error)
	return n
}

// emitN writes n events of topic (the queue, with the default routing).
func emitN(t testing.TB, db *gorm.DB, n int, topic string) {
	t.Helper()
	testenv.Emit(t, db, n, func(i int) outbox.Event {
		return outbox.Event{
			ID: eventID(i), Type: "order.created", Topic: topic,
			AggregateType: "order", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i},
		}
	})
}

func eventID(i int) string { return fmt.Sprintf("ev-%06d", i) }
