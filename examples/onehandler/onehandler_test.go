package onehandler_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testdb"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// SignedUp is the event's payload.
type SignedUp struct {
	User  string `json:"user"`
	Email string `json:"email"`
}

// welcome is the application's handler: written once, against package
// consume only.
type welcome struct {
	mu   sync.Mutex
	seen map[string][]string // messaging system → event ids
}

func (w *welcome) handle(ctx context.Context, tx *gorm.DB, u SignedUp) error {
	d, ok := consume.DeliveryFrom(ctx)
	if !ok {
		return fmt.Errorf("no delivery in the handler's context")
	}
	e, _ := consume.EnvelopeFrom(ctx)
	w.mu.Lock()
	w.seen[d.System] = append(w.seen[d.System], e.ID)
	w.mu.Unlock()
	return tx.Exec("INSERT INTO welcomed (event_id, user_name) VALUES (?, ?)", e.ID, u.User).Error
}

func (w *welcome) count(system string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.seen[system])
}

// broker is one way to deliver the events: a relay publisher, and a way
// to run the one handler against what it published.
type broker struct {
	system string
	pub    relay.Publisher
	topic  string
	run    func(t *testing.T, ctx context.Context, h consume.Handler) // until ctx ends
	// subscribe, when not nil, registers the handler before the relay
	// starts: in process, publishing is handling, and an event published
	// before its handler is registered goes to no one.
	subscribe func(t *testing.T, h consume.Handler)
}

const perBroker = 5

// The same handler value runs on every broker: each broker's events reach
// it, through that broker's consumer, with its Delivery and envelope, and
// its effect happens once per event.
func TestOneHandlerEveryBroker(t *testing.T) {
	db := testdb.Open(t, testdb.SQLite, testdb.Create(t, testdb.SQLite, "", "onehandler_"), testenv.Config())
	must(t, db.Use(&outbox.Plugin{}))
	must(t, outbox.Migrate(db))
	must(t, db.Exec("CREATE TABLE welcomed (event_id TEXT PRIMARY KEY, user_name TEXT)").Error)
	store, err := idempotency.NewStore(db)
	must(t, err)

	w := &welcome{seen: map[string][]string{}}
	h := consume.IdempotentTx(store, "welcome", consume.TxHandlerOf(w.handle)) // the one handler

	for _, b := range brokers(t, store) {
		t.Run(b.system, func(t *testing.T) {
			for i := range perBroker {
				must(t, db.Transaction(func(tx *gorm.DB) error {
					return outbox.Emit(tx, outbox.Event{Type: "user.signed_up", Topic: b.topic, PartitionKey: "u" + fmt.Sprint(i),
						Payload: SignedUp{User: fmt.Sprintf("%s-%d", b.system, i), Email: "x@example.com"}})
				}))
			}
			if b.subscribe != nil {
				b.subscribe(t, h)
			}
			r, err := relay.New(db, b.pub, relay.WithLogger(quiet()), relay.WithPollInterval(20*time.Millisecond))
			must(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			wg.Go(func() { _ = r.Start(ctx) })
			wg.Go(func() { b.run(t, ctx, h) })
			for w.count(b.system) < perBroker && ctx.Err() == nil {
				time.Sleep(20 * time.Millisecond)
			}
			cancel()
			wg.Wait()
			if n := w.count(b.system); n != perBroker {
				t.Errorf("%s: the handler ran for %d of %d events", b.system, n, perBroker)
			}
		})
	}
	var effects int64
	must(t, db.Raw("SELECT COUNT(*) FROM welcomed").Scan(&effects).Error)
	if want := int64(perBroker * len(w.seen)); effects != want || len(w.seen) < 2 {
		t.Errorf("%d effects for %d systems, want %d", effects, len(w.seen), want)
	}
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// brokers lists every broker: in-process and Kafka (kfake) always, the
// others when their variable is set (skipped naming it, or failed with
// OUTBOX_REQUIRE_SERVICES=1, otherwise).
func brokers(t *testing.T, store *idempotency.Store) []broker {
	out := []broker{inprocBroker(t, store), kafkaBroker(t)}
	if addr, ok := env(t, testenv.RedisEnv, "127.0.0.1:6379"); ok {
		out = append(out, redisBroker(t, addr), asynqBroker(t, addr))
	}
	if url, ok := env(t, "OUTBOX_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"); ok {
		out = append(out, amqpBroker(t, url))
	}
	if url, ok := env(t, "OUTBOX_NATS_URL", "nats://127.0.0.1:4222"); ok {
		out = append(out, natsBroker(t, url))
	}
	return out
}

// env reads a server's variable; an unset one is reported as the other
// tests of the repository do.
func env(t *testing.T, name, example string) (string, bool) {
	if v := os.Getenv(name); v != "" {
		return v, true
	}
	t.Run("needs "+name, func(t *testing.T) { testenv.Unavailable(t, name, example) })
	return "", false
}

func inprocBroker(t *testing.T, store *idempotency.Store) broker {
	mux := inproc.NewMux(store)
	return broker{system: inproc.System, pub: mux,
		subscribe: func(t *testing.T, h consume.Handler) { must(t, mux.Handle("user.signed_up", "welcome-inproc", h)) },
		run:       func(t *testing.T, ctx context.Context, h consume.Handler) { <-ctx.Done() }}
}

func redisBroker(t *testing.T, addr string) broker {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	stream := "onehandler:" + testdb.RandomHex(4)
	t.Cleanup(func() { rdb.Del(context.Background(), stream) })
	return broker{system: "redis", pub: outboxredis.NewStreamPublisher(rdb), topic: stream,
		run: func(t *testing.T, ctx context.Context, h consume.Handler) {
			c, err := outboxredis.NewConsumer(rdb, stream, "mail", "c1", h, consume.WithLogger(quiet()), outboxredis.WithBlock(50*time.Millisecond))
			must(t, err)
			must(t, c.Run(ctx))
		}}
}

func asynqBroker(t *testing.T, addr string) broker {
	opt := asynq.RedisClientOpt{Addr: addr}
	client := asynq.NewClient(opt)
	t.Cleanup(func() { _ = client.Close() })
	queue := "onehandler" + testdb.RandomHex(4)
	return broker{system: "asynq", pub: outboxasynq.NewPublisher(client), topic: queue,
		run: func(t *testing.T, ctx context.Context, h consume.Handler) {
			mux := asynq.NewServeMux()
			mux.Handle("user.signed_up", outboxasynq.Handler(h, consume.WithLogger(quiet())))
			srv := asynq.NewServer(opt, asynq.Config{Queues: map[string]int{queue: 1}, IsFailure: outboxasynq.IsFailure,
				RetryDelayFunc: outboxasynq.RetryDelay(nil), Logger: nopLogger{}})
			must(t, srv.Start(mux))
			<-ctx.Done()
			srv.Shutdown()
			insp := asynq.NewInspector(opt)
			_ = insp.DeleteQueue(queue, true)
			_ = insp.Close()
		}}
}

func amqpBroker(t *testing.T, url string) broker {
	conn, err := amqp.Dial(url)
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	queue := "onehandler." + testdb.RandomHex(4)
	pub, err := outboxamqp.NewPublisher(conn, outboxamqp.WithRouting(func(e *outbox.Envelope) (string, string) { return "", e.Topic }))
	must(t, err)
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_ = ch.Close()
		}
	})
	return broker{system: "rabbitmq", pub: pub, topic: queue, run: func(t *testing.T, ctx context.Context, h consume.Handler) {
		c, err := outboxamqp.NewConsumer(conn, queue, h, consume.WithLogger(quiet()),
			outboxamqp.WithConsumerTopology(func(ch *amqp.Channel) error {
				_, err := ch.QueueDeclare(queue, false, false, false, false, nil)
				return err
			}))
		must(t, err)
		must(t, c.Run(ctx))
	}}
}

func natsBroker(t *testing.T, url string) broker {
	nc, err := nats.Connect(url)
	must(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	must(t, err)
	name := "ONEHANDLER" + testdb.RandomHex(4)
	subject := "onehandler" + testdb.RandomHex(4)
	_, err = js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subject}})
	must(t, err)
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	pub, err := outboxnats.NewPublisher(js)
	must(t, err)
	return broker{system: "nats", pub: pub, topic: subject, run: func(t *testing.T, ctx context.Context, h consume.Handler) {
		c, err := outboxnats.NewConsumer(js, name, "mail", h, consume.WithLogger(quiet()))
		must(t, err)
		must(t, c.Run(ctx))
	}}
}

func kafkaBroker(t *testing.T) broker {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "users"))
	must(t, err)
	t.Cleanup(cluster.Close)
	opts := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(opts, kgo.ProducerLinger(0))...)
	must(t, err)
	t.Cleanup(cl.Close)
	pub, err := outboxkafka.NewPublisher(cl)
	must(t, err)
	return broker{system: "kafka", pub: pub, topic: "users", run: func(t *testing.T, ctx context.Context, h consume.Handler) {
		c, err := outboxkafka.NewConsumer(opts, "users", "mail", h, consume.WithLogger(quiet()))
		must(t, err)
		must(t, c.Run(ctx))
	}}
}

type nopLogger struct{}

func (nopLogger) Debug(...any) {}
func (nopLogger) Info(...any)  {}
func (nopLogger) Warn(...any)  {}
func (nopLogger) Error(...any) {}
func (nopLogger) Fatal(...any) {}
