package walbrokers

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/relay"
	"github.com/gormoutbox/outbox/tests/internal/servers"
)

// events is how many events each test writes: one per transaction, over
// keys, so that the commit order of each key is the order written.
const (
	events = 600
	keys   = 6
)

// need returns the environment variable, or skips t (fails it under
// OUTBOX_REQUIRE_SERVICES=1) when it is unset.
func need(t *testing.T, env string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		if os.Getenv(servers.RequireEnv) == "1" {
			t.Fatalf("%s is not set", env)
		}
		t.Skipf("%s is not set: no broker to test WAL mode through", env)
	}
	return v
}

// walDB starts a throw-away PostgreSQL with wal_level=logical and opens it
// in WAL mode, migrated (the slot exists).
func walDB(t *testing.T) *gorm.DB {
	t.Helper()
	pg := servers.StartPostgres(t, servers.WithArgs("-c", "wal_level=logical", "-c", "max_wal_senders=10", "-c", "max_replication_slots=10"))
	db, err := gorm.Open(postgres.Open(pg.DSN()), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(&outbox.Plugin{WAL: &outbox.WAL{}, AutoMigrate: true}); err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// write commits the events, one per transaction, key i%keys.
func write(t *testing.T, db *gorm.DB) {
	t.Helper()
	for i := range events {
		err := db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{ID: fmt.Sprintf("ev-%04d", i), Type: "wal.test",
				PartitionKey: "k" + strconv.Itoa(i%keys), Payload: map[string]int{"seq": i}})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// run starts a relay on pub until t ends.
func run(t *testing.T, db *gorm.DB, pub relay.Publisher) {
	t.Helper()
	r, err := relay.New(db, pub)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
}

// received checks what a broker handed over: every event at least once,
// and the first delivery of each key's events in commit order.
type received struct {
	seen map[string]bool
	last map[string]int
	bad  int
}

func (r *received) add(t *testing.T, body []byte) {
	env, err := outbox.DecodeEnvelope(body)
	if err != nil {
		t.Errorf("undecodable message: %v", err)
		return
	}
	if r.seen[env.ID] {
		return // a redelivery
	}
	r.seen[env.ID] = true
	var seq int
	if _, err := fmt.Sscanf(env.ID, "ev-%d", &seq); err != nil {
		t.Errorf("unexpected event %s", env.ID)
		return
	}
	if prev, ok := r.last[env.PartitionKey]; ok && seq < prev {
		r.bad++
		t.Errorf("key %s: %s after ev-%04d", env.PartitionKey, env.ID, prev)
	}
	r.last[env.PartitionKey] = seq
}

func TestWALThroughRabbitMQ(t *testing.T) {
	url := need(t, "OUTBOX_AMQP_URL")
	db := walDB(t)
	name := fmt.Sprintf("walbrokers-%d", time.Now().UnixNano())
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(name, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	pub, err := outboxamqp.NewPublisher(nil, outboxamqp.WithDial(outboxamqp.Dialer(url, amqp.Config{})),
		outboxamqp.WithRouting(func(*outbox.Envelope) (string, string) { return "", name }))
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	run(t, db, pub)
	write(t, db)
	msgs, err := ch.Consume(name, "", true, true, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := &received{seen: map[string]bool{}, last: map[string]int{}}
	deadline := time.After(60 * time.Second)
	for len(got.seen) < events {
		select {
		case m := <-msgs:
			got.add(t, m.Body)
		case <-deadline:
			t.Fatalf("received %d of %d events", len(got.seen), events)
		}
	}
}

func TestWALThroughNATS(t *testing.T) {
	url := need(t, "OUTBOX_NATS_URL")
	db := walDB(t)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	name := fmt.Sprintf("WALBROKERS_%d", time.Now().UnixNano())
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"},
		Storage: jetstream.MemoryStorage, Duplicates: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	pub, err := outboxnats.NewPublisher(js, outboxnats.WithSubjectPrefix(name+"."), outboxnats.WithExpectStream(name))
	if err != nil {
		t.Fatal(err)
	}
	run(t, db, pub)
	write(t, db)
	got := &received{seen: map[string]bool{}, last: map[string]int{}}
	cons, err := stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(got.seen) < events && time.Now().Before(deadline) {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got.add(t, m.Data())
		}
	}
	if len(got.seen) < events {
		t.Fatalf("received %d of %d events", len(got.seen), events)
	}
}
