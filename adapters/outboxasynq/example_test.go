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
	"github.com/redis/go-redis/v9"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/consume"
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

// An asynq server runs handlers written against package consume, the same
// as on every broker, with its policy: IsFailure and RetryDelay let the
// handler decide what counts and when a task runs again. (It needs Redis,
// so it is compiled, not run.)
func ExampleHandler_server() {
	type Order struct{ ID, Total int }
	ship := consume.HandlerOf(func(ctx context.Context, o Order) error {
		d, _ := consume.DeliveryFrom(ctx)
		log.Printf("order %d: %d cents (attempt %d of %d)", o.ID, o.Total, d.Attempt, d.MaxAttempts)
		return nil
	})
	mux := asynq.NewServeMux()
	mux.Handle("order.created", outboxasynq.Handler(ship, consume.WithMaxDeliveries(5), consume.WithRetryDelay(time.Second)))
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "localhost:6379"}, asynq.Config{
		Queues:         map[string]int{"orders": 1},
		IsFailure:      outboxasynq.IsFailure,       // outages and snoozes do not spend retries
		RetryDelayFunc: outboxasynq.RetryDelay(nil), // the handler's delays
	})
	if err := srv.Run(mux); err != nil {
		log.Fatal(err)
	}
}

// What Handler returns to asynq for a task, shown without Redis: the task
// is built the way a Publisher builds it.
func ExampleHandler() {
	h := outboxasynq.Handler(consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		var o struct{ ID, Total int }
		if err := e.Unmarshal(&o); err != nil {
			return outbox.Permanent(err)
		}
		fmt.Printf("%s %s: order %d, total %d\n", e.Type, e.ID, o.ID, o.Total)
		return nil
	}), consume.WithLogger(slog.New(slog.DiscardHandler))) // it logs dead tasks at error level
	env := &outbox.Envelope{ID: "evt-1", Type: "order.created", Payload: []byte(`{"ID":7,"Total":1999}`)}
	payload, _ := json.Marshal(env)
	fmt.Println(h.ProcessTask(context.Background(), asynq.NewTask("order.created", payload)))

	env.Payload = []byte(`"not an order"`)
	payload, _ = json.Marshal(env)
	err := h.ProcessTask(context.Background(), asynq.NewTask("order.created", payload))
	fmt.Println("archived:", errors.Is(err, asynq.SkipRetry), "counted:", outboxasynq.IsFailure(err))

	err = h.ProcessTask(context.Background(), asynq.NewTask("order.created", []byte("garbage")))
	fmt.Println("archived:", errors.Is(err, asynq.SkipRetry), "invalid task:", errors.Is(err, outboxasynq.ErrInvalidTask))
	// Output:
	// order.created evt-1: order 7, total 1999
	// <nil>
	// archived: true counted: true
	// archived: true invalid task: true
}

// consume.IdempotentTx runs a handler in a transaction in which its
// idempotency record commits too: delivered twice, or retried after a
// failure, the handler's writes happen once.
func ExampleHandler_idempotent() {
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
	h := outboxasynq.Handler(consume.IdempotentTx(store, "shipping", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		attempts++
		if err := tx.Create(&Shipment{OrderID: e.AggregateID}).Error; err != nil {
			return err
		}
		if attempts == 1 {
			return errors.New("carrier API timed out") // rolls the shipment back; asynq retries
		}
		return nil
	}), consume.WithLogger(slog.New(slog.DiscardHandler)))

	payload, _ := json.Marshal(&outbox.Envelope{ID: "evt-9", Type: "order.paid", AggregateType: "order", AggregateID: "9"})
	task := asynq.NewTask("order.paid", payload)
	for range 3 { // a failure, its retry, then a duplicate delivery
		err := h.ProcessTask(context.Background(), task)
		fmt.Println(err == nil, outboxasynq.IsFailure(err))
	}
	var shipments int64
	db.Model(&Shipment{}).Count(&shipments)
	fmt.Println("handler runs:", attempts, "shipments:", shipments)
	// Output:
	// false true
	// true false
	// true false
	// handler runs: 2 shipments: 1
}

// A handler reads what asynq says of its task from the Delivery's Details.
func ExampleTask() {
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		d, _ := consume.DeliveryFrom(ctx)
		task := d.Details.(outboxasynq.Task)
		log.Printf("task %s of queue %s, retried %d of %d", task.ID, task.Queue, task.Retried, task.MaxRetry)
		return nil
	})
	asynq.NewServeMux().Handle("order.created", outboxasynq.Handler(h))
}

// The tasks of one partition key run one at a time, in commit order, on
// any worker of any server: the publisher names each task's predecessor,
// and KeyOrder, first among the middlewares, waits for it. (It needs
// Redis, so it is compiled, not run.)
func ExampleKeyOrder() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	pub := outboxasynq.NewPublisher(asynq.NewClientFromRedisClient(rdb), outboxasynq.WithKeyChain(rdb))
	_ = pub // relay.New(db, pub)

	mux := asynq.NewServeMux()
	mux.Use(outboxasynq.KeyOrder(rdb, time.Second))
	mux.Handle("account.debited", outboxasynq.Handler(consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		log.Printf("account %s: %s", e.PartitionKey, e.ID) // in order, per account
		return nil
	})))
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{
		IsFailure:                outboxasynq.IsFailure,
		RetryDelayFunc:           outboxasynq.RetryDelay(nil),
		DelayedTaskCheckInterval: 200 * time.Millisecond, // waiting tasks run again sooner
	})
	if err := srv.Run(mux); err != nil {
		log.Fatal(err)
	}
}

// The archive of a queue, read a page at a time and replayed: the tasks
// run again. (It needs Redis, so it is compiled, not run.)
func ExampleNewDeadLetters() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	dl := outboxasynq.NewDeadLetters(rdb, "orders")
	page, next, err := dl.DeadLetters(context.Background(), "", 50)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range page {
		log.Printf("%s from %s: %s", m.ID, m.Source, m.Reason)
	}
	_ = next // the cursor of the next page, "" after the last
	n, err := dl.ReplayDead(context.Background(), page[0].ID)
	log.Printf("%d replayed (%v)", n, err)
}
