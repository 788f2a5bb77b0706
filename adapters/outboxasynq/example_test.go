package outboxasynq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// A worker process relays committed events into asynq: one task per event,
// in the queue named by the event's Topic unless WithQueue says otherwise.
// (It needs Redis and PostgreSQL, so it is compiled, not run.)
func ExampleNewPublisher() {
	db, err := gorm.Open(postgres.Open("postgres://localhost/shop"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	client := asynq.NewClient(asynq.RedisClientOpt{Addr: "localhost:6379"})
	defer client.Close()

	pub := outboxasynq.NewPublisher(client,
		outboxasynq.WithQueue(func(e *outbox.Envelope) string { return "orders" }),
		outboxasynq.WithMaxRetry(10),
		outboxasynq.WithTimeout(time.Minute),
	)
	r, err := relay.New(db, pub) // fails if an option was invalid
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if err := r.Start(ctx); err != nil { // until ctx ends
		log.Fatal(err)
	}
}

// An asynq server consumes the tasks; Handler decodes each one into its
// envelope. (It needs Redis, so it is compiled, not run.)
func ExampleHandler_server() {
	type Order struct{ ID, Total int }
	mux := asynq.NewServeMux()
	mux.Handle("order.created", outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
		var o Order
		if err := e.Unmarshal(&o); err != nil {
			return outbox.Permanent(err) // archived at once: retrying cannot fix it
		}
		log.Printf("order %d: %d cents (event %s, attempt %d)", o.ID, o.Total, e.ID, e.Attempt)
		return nil
	}))
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "localhost:6379"}, asynq.Config{
		Queues:    map[string]int{"orders": 1},
		IsFailure: outboxasynq.IsFailure, // outages and in-progress duplicates do not spend retries
	})
	if err := srv.Run(mux); err != nil {
		log.Fatal(err)
	}
}

// What Handler does with a task, shown without Redis: the task is built the
// way a Publisher builds it.
func ExampleHandler() {
	h := outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
		var o struct{ ID, Total int }
		if err := e.Unmarshal(&o); err != nil {
			return outbox.Permanent(err)
		}
		fmt.Printf("%s %s: order %d, total %d\n", e.Type, e.ID, o.ID, o.Total)
		return nil
	}, outboxasynq.WithLogger(slog.New(slog.DiscardHandler))) // it logs malformed tasks at error level
	env := &outbox.Envelope{ID: "evt-1", Type: "order.created", Payload: []byte(`{"ID":7,"Total":1999}`)}
	payload, _ := json.Marshal(env)
	fmt.Println(h.ProcessTask(context.Background(), asynq.NewTask("order.created", payload)))

	env.Payload = []byte(`"not an order"`)
	payload, _ = json.Marshal(env)
	err := h.ProcessTask(context.Background(), asynq.NewTask("order.created", payload))
	fmt.Println("skip retry:", errors.Is(err, asynq.SkipRetry))

	err = h.ProcessTask(context.Background(), asynq.NewTask("order.created", []byte("garbage")))
	fmt.Println("skip retry:", errors.Is(err, asynq.SkipRetry), "invalid task:", errors.Is(err, outboxasynq.ErrInvalidTask))
	// Output:
	// order.created evt-1: order 7, total 1999
	// <nil>
	// skip retry: true
	// skip retry: true invalid task: true
}

// IdempotentTx runs a handler in a transaction in which its idempotency
// record commits too: delivered twice, or retried after a failure, the
// handler's writes happen once.
func ExampleIdempotentTx() {
	// testenv.SQLiteDialector is sqlite.Open of gorm.io/driver/sqlite, or of
	// the pure-Go driver in a build without cgo.
	db, err := gorm.Open(testenv.SQLiteDialector("file:asynq-example?mode=memory&cache=shared&_txlock=immediate"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	type Shipment struct {
		ID      uint
		OrderID string
	}
	if err := errors.Join(idempotency.Migrate(context.Background(), db), db.AutoMigrate(&Shipment{})); err != nil {
		log.Fatal(err)
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		log.Fatal(err)
	}

	attempts := 0
	h := outboxasynq.IdempotentTx(store, "shipping")(outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
		attempts++
		if err := outboxasynq.Tx(ctx).Create(&Shipment{OrderID: e.AggregateID}).Error; err != nil {
			return err
		}
		if attempts == 1 {
			return errors.New("carrier API timed out") // rolls the shipment back; asynq retries
		}
		return nil
	}))

	payload, _ := json.Marshal(&outbox.Envelope{ID: "evt-9", Type: "order.paid", AggregateType: "order", AggregateID: "9"})
	task := asynq.NewTask("order.paid", payload)
	for range 3 { // a failure, its retry, then a duplicate delivery
		fmt.Println(h.ProcessTask(context.Background(), task))
	}
	var shipments int64
	db.Model(&Shipment{}).Count(&shipments)
	fmt.Println("handler runs:", attempts, "shipments:", shipments)
	// Output:
	// carrier API timed out
	// <nil>
	// <nil>
	// handler runs: 2 shipments: 1
}
