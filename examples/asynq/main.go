// Command asynq shows gorm-outbox delivering through asynq: a service
// writes orders (some transactions roll back), each committed order emits
// order.placed from its AfterCreate hook in the same transaction, a relay
// enqueues those events as asynq tasks, and an asynq server ships each
// order exactly once, although the carrier fails now and then and asynq
// retries. It needs only a Redis server; the database is a SQLite file in
// a temporary directory unless -dsn names another.
//
//	go run ./examples/asynq -redis localhost:6379
//	go run ./examples/asynq -dsn 'postgres://localhost/shop?sslmode=disable'
//
// It finishes by itself, prints a summary, and exits with status 1 if the
// summary is not what the guarantees promise.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
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
	"github.com/gormoutbox/outbox/relay"
)

// Order is a business row. Its AfterCreate hook emits order.placed in the
// same transaction: the event exists exactly when the order does.
type Order struct {
	ID       uint
	Run      string `gorm:"size:32;index"`
	Customer string
	Amount   int
}

// AfterCreate emits the order's event through the statement's transaction.
func (o *Order) AfterCreate(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{
		Type:          "order.placed",
		AggregateType: "order",
		AggregateID:   strconv.Itoa(int(o.ID)),
		PartitionKey:  "customer-" + o.Customer, // a customer's orders arrive in order
		Payload:       o,
	})
}

// Shipment is what the consumer writes, once per order.
type Shipment struct {
	ID      uint
	Run     string `gorm:"size:32;index"`
	OrderID uint   `gorm:"index"`
}

var errDeclined = errors.New("payment declined")

type config struct {
	redis   string
	dsn     string
	queue   string
	orders  int
	timeout time.Duration
	keep    bool
	verbose bool
	out     io.Writer
}

func main() {
	cfg := config{out: os.Stdout}
	flag.StringVar(&cfg.redis, "redis", envOr("OUTBOX_REDIS_ADDR", "127.0.0.1:6379"), "Redis address (env OUTBOX_REDIS_ADDR)")
	flag.StringVar(&cfg.dsn, "dsn", os.Getenv("OUTBOX_EXAMPLE_DSN"), "database: a postgres:// URL or a SQLite DSN (env OUTBOX_EXAMPLE_DSN; default: a SQLite file in a temporary directory)")
	flag.StringVar(&cfg.queue, "queue", "", "asynq queue (default: outbox-example-<run id>, deleted at the end)")
	flag.IntVar(&cfg.orders, "orders", 40, "orders to attempt; every fifth is rolled back")
	flag.DurationVar(&cfg.timeout, "timeout", time.Minute, "give up after this long")
	flag.BoolVar(&cfg.keep, "keep", false, "keep the queue's tasks in Redis at the end")
	flag.BoolVar(&cfg.verbose, "v", false, "log the relay and asynq at debug level")
	flag.Parse()
	if err := run(context.Background(), cfg); err != nil {
		fmt.Fprintln(os.Stderr, "asynq example:", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run(ctx context.Context, cfg config) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	runID := newRunID()
	if cfg.queue == "" {
		cfg.queue = "outbox-example-" + runID
	}
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	// 1. The database: the outbox, the idempotency records, the business tables.
	db, closeDB, err := openDB(cfg.dsn)
	if err != nil {
		return err
	}
	defer closeDB()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		return err
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		return err
	}
	if err := db.AutoMigrate(&Order{}, &Shipment{}); err != nil {
		return err
	}

	// 2. The relay: committed events become asynq tasks in our queue, with
	//    the event id as TaskID (a redelivery is not enqueued twice).
	redisOpt := asynq.RedisClientOpt{Addr: cfg.redis}
	client := asynq.NewClient(redisOpt)
	defer client.Close()
	if err := client.Ping(); err != nil {
		return fmt.Errorf("redis at %s: %w (set -redis or OUTBOX_REDIS_ADDR)", cfg.redis, err)
	}
	if !cfg.keep {
		defer deleteQueue(cfg.redis, cfg.queue)
	}
	pub := outboxasynq.NewPublisher(client,
		outboxasynq.WithQueue(func(*outbox.Envelope) string { return cfg.queue }),
		outboxasynq.WithMaxRetry(5),
		outboxasynq.WithLogger(log))
	r, err := relay.New(db, pub, relay.WithLogger(log), relay.WithPollInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	relayCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Start(relayCtx) }()

	// 3. The consumer: an asynq server running a handler of package
	//    consume (the same handler runs on every broker). IdempotentTx runs
	//    it in a transaction with its idempotency record, so the shipment is
	//    written once per order whatever asynq retries or the relay
	//    redelivers.
	var runs, carrierFailures atomic.Int64
	ship := consume.IdempotentTx(store, "shipping", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		runs.Add(1)
		var o Order
		if err := e.Unmarshal(&o); err != nil {
			return outbox.Permanent(err) // archived: retrying cannot fix it
		}
		if err := tx.Create(&Shipment{Run: o.Run, OrderID: o.ID}).Error; err != nil {
			return err
		}
		if d, _ := consume.DeliveryFrom(ctx); o.ID%7 == 0 && d.Attempt == 1 {
			carrierFailures.Add(1)
			// The write above rolls back with the error; asynq retries.
			return fmt.Errorf("carrier API timed out for order %d", o.ID)
		}
		return nil
	})
	mux := asynq.NewServeMux()
	mux.Handle("order.placed", outboxasynq.Handler(ship, consume.WithLogger(log), consume.WithRetryDelay(200*time.Millisecond)))
	asynqLevel := asynq.ErrorLevel
	if cfg.verbose {
		asynqLevel = asynq.DebugLevel
	}
	srv := asynq.NewServer(redisOpt, asynq.Config{
		Concurrency:              4,
		Queues:                   map[string]int{cfg.queue: 1},
		IsFailure:                outboxasynq.IsFailure,
		RetryDelayFunc:           outboxasynq.RetryDelay(nil), // the handler's delays
		DelayedTaskCheckInterval: 200 * time.Millisecond,
		LogLevel:                 asynqLevel,
	})
	if err := srv.Start(mux); err != nil {
		return err
	}
	defer srv.Shutdown()

	// 4. The service writes orders; every fifth payment is declined and its
	//    transaction rolls back, taking its event with it.
	customers := []string{"ada", "bob", "cyd"}
	var committed []uint
	rolledBack := 0
	fmt.Fprintf(cfg.out, "run %s: placing %d orders (queue %s)\n", runID, cfg.orders, cfg.queue)
	for i := range cfg.orders {
		o := Order{Run: runID, Customer: customers[i%len(customers)], Amount: 10 + i}
		err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&o).Error; err != nil {
				return err
			}
			if i%5 == 4 {
				return errDeclined
			}
			return nil
		})
		switch {
		case err == nil:
			committed = append(committed, o.ID)
		case errors.Is(err, errDeclined):
			rolledBack++
		default:
			return err
		}
	}

	// 5. Wait until every committed order is shipped.
	shipped := func() (int64, error) {
		var n int64
		err := db.Model(&Shipment{}).Where("run = ?", runID).Count(&n).Error
		return n, err
	}
	for {
		n, err := shipped()
		if err != nil {
			return err
		}
		if n >= int64(len(committed)) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("only %d of %d orders shipped before the timeout", n, len(committed))
		case <-time.After(100 * time.Millisecond):
		}
	}
	stopRelay()
	if err := <-relayDone; err != nil {
		return err
	}
	srv.Shutdown()

	// 6. The summary, checked against the guarantees.
	var shipments, distinctOrders, strays, events int64
	db.Model(&Shipment{}).Where("run = ?", runID).Count(&shipments)
	db.Model(&Shipment{}).Where("run = ?", runID).Distinct("order_id").Count(&distinctOrders)
	db.Model(&Shipment{}).Where("run = ? AND order_id NOT IN ?", runID, committed).Count(&strays)
	db.Model(&outbox.OutboxEvent{}).Where("aggregate_type = ? AND aggregate_id IN ?", "order", ids(committed)).Count(&events)
	fmt.Fprintf(cfg.out, "summary\n")
	fmt.Fprintf(cfg.out, "  orders committed:          %d (rolled back: %d)\n", len(committed), rolledBack)
	fmt.Fprintf(cfg.out, "  events written:            %d\n", events)
	fmt.Fprintf(cfg.out, "  handler runs:              %d (carrier failures retried: %d)\n", runs.Load(), carrierFailures.Load())
	fmt.Fprintf(cfg.out, "  shipments:                 %d for %d distinct orders\n", shipments, distinctOrders)
	var problems []string
	if events != int64(len(committed)) {
		problems = append(problems, fmt.Sprintf("%d events for %d committed orders", events, len(committed)))
	}
	if shipments != int64(len(committed)) || distinctOrders != shipments {
		problems = append(problems, fmt.Sprintf("%d shipments for %d distinct orders, want %d of each", shipments, distinctOrders, len(committed)))
	}
	if strays > 0 {
		problems = append(problems, fmt.Sprintf("%d shipments of rolled-back orders", strays))
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	fmt.Fprintf(cfg.out, "  every committed order shipped exactly once\n")
	return nil
}

// retried is how many times asynq has retried the task being handled.
// openDB opens PostgreSQL for a postgres:// URL, else SQLite; with no DSN,
// a SQLite file in a temporary directory, removed by the returned func.
func openDB(dsn string) (*gorm.DB, func(), error) {
	cfg := &gorm.Config{Logger: logger.Discard}
	cleanup := func() {}
	var d gorm.Dialector
	switch {
	case strings.HasPrefix(dsn, "postgres://"), strings.HasPrefix(dsn, "postgresql://"), strings.Contains(dsn, "host="):
		d = postgres.Open(dsn)
	case dsn == "":
		dir, err := os.MkdirTemp("", "gorm-outbox-asynq")
		if err != nil {
			return nil, nil, err
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		d = openSQLite(filepath.Join(dir, "shop.db"))
	default:
		d = sqliteDialector(dsn)
	}
	db, err := gorm.Open(d, cfg)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	sqlDB.SetMaxIdleConns(8) // the relay and four asynq workers share the pool
	return db, func() { _ = sqlDB.Close(); cleanup() }, nil
}

// deleteQueue removes every key of the queue from Redis (asynq hash-tags
// them "asynq:{<queue>}:…"), completed tasks included, and nothing else.
func deleteQueue(addr, queue string) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "asynq:{"+queue+"}:*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Unlink(ctx, iter.Val())
	}
	rdb.SRem(ctx, "asynq:queues", queue)
}

func ids(us []uint) []string {
	out := make([]string, len(us))
	for i, u := range us {
		out[i] = strconv.Itoa(int(u))
	}
	return out
}

func newRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
