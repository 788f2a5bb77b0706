package outboxredis_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// A relay that appends every committed event to a Redis stream named after
// its Topic. (Needs a Redis server, so it is compiled, not run.)
func ExampleNewStreamPublisher() {
	// testenv.SQLiteDialector is sqlite.Open of gorm.io/driver/sqlite, or of
	// the pure-Go driver in a build without cgo.
	db, err := gorm.Open(testenv.SQLiteDialector("file:shop.db?_txlock=immediate&_busy_timeout=5000"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	pub := outboxredis.NewStreamPublisher(rdb,
		outboxredis.WithStreamPrefix("shop:"),
		outboxredis.WithDefaultStream("events"), // events without a Topic
		outboxredis.WithMaxLen(1_000_000),       // trim to about a million entries
		outboxredis.WithSource("shop-api"),
	)
	r, err := relay.New(db, pub) // refuses a publisher with a bad option
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := r.Start(ctx); err != nil {
		log.Fatal(err)
	}
}

// exampleStore opens the application's database and its idempotency store.
func exampleStore(dsn string) (*gorm.DB, *idempotency.Store) {
	db, err := gorm.Open(testenv.SQLiteDialector(dsn), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := outbox.Migrate(db); err != nil { // the idempotency records too
		log.Fatal(err)
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		log.Fatal(err)
	}
	return db, store
}

// A consumer of a group whose handler writes to the database exactly once
// per event, however often the stream delivers it; dead messages go to a
// dead-letter stream. (Needs Redis.)
func ExampleNewConsumer() {
	_, store := exampleStore("file:stats.db?_txlock=immediate&_busy_timeout=5000")
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	countOrder := consume.IdempotentTx(store, "order-stats", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		var order struct{ Total float64 }
		if err := e.Unmarshal(&order); err != nil {
			return outbox.Permanent(err) // a bad payload never gets better: dead-letter it
		}
		return tx.Exec("UPDATE stats SET orders = orders + 1, revenue = revenue + ?", order.Total).Error
	})
	host, _ := os.Hostname()
	c, err := outboxredis.NewConsumer(rdb, "shop:orders", "order-stats", host, countOrder,
		outboxredis.WithDeadLetterStream("shop:orders:dead"), // the broker's own options…
		outboxredis.WithMinIdle(30*time.Second),
		consume.WithMaxDeliveries(5), // …and the shared ones, in one list
		consume.WithOnDead(func(ctx context.Context, d consume.DeadLetter) {
			log.Printf("dead message %s: %v", d.Delivery.Details.(outboxredis.Entry).EntryID, d.Reason)
		}),
	)
	if err != nil {
		log.Fatal(err) // a bad option
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil { // returns nil when ctx ends
		log.Fatal(err)
	}
}

// A handler reads what Redis says of its entry from the Delivery's
// Details. (Needs Redis.)
func ExampleEntry() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	h := consume.HandlerOf(func(ctx context.Context, o struct{ ID int }) error {
		d, _ := consume.DeliveryFrom(ctx)
		entry := d.Details.(outboxredis.Entry)
		log.Printf("order %d: entry %s, counted attempt %d of %d, delivered %d times",
			o.ID, entry.EntryID, d.Attempt, d.MaxAttempts, entry.Deliveries)
		return nil
	})
	c, err := outboxredis.NewConsumer(rdb, "shop:orders", "receipts", "worker-1", h)
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Run(context.Background())
}

// The events of one partition key handled one at a time, in commit order,
// by any number of consumers: the publisher chains each key's entries,
// and every consumer of the group waits for an entry's predecessor.
// (Needs Redis.)
func ExampleWithKeyOrder() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithKeyChain())
	_ = pub // relay.New(db, pub)

	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		log.Printf("account %s: %s", e.PartitionKey, e.Type) // in order, per account
		return nil
	})
	host, _ := os.Hostname()
	c, err := outboxredis.NewConsumer(rdb, "ledger", "balances", host, h,
		outboxredis.WithKeyOrder(), consume.WithConcurrency(8)) // other keys run at once
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Run(context.Background())
}

// The dead-letter stream, read a page at a time and replayed: the entries
// go back to the stream they came from, and are consumed again. (Needs
// Redis.)
func ExampleNewDeadLetters() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	dl := outboxredis.NewDeadLetters(rdb, "shop:orders:dead")
	ctx := context.Background()
	var ids []string
	for cursor := ""; ; {
		page, next, err := dl.DeadLetters(ctx, cursor, 100)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range page {
			log.Printf("%s from %s, dead at %v after %d deliveries: %s", m.ID, m.Source, m.DeadAt, m.Deliveries, m.Reason)
			ids = append(ids, m.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	n, err := dl.ReplayDead(ctx, ids...)
	log.Printf("%d replayed (%v)", n, err)
}

// The stream of each event: its Topic, or the default stream, after the
// prefix; WithStreamFunc can choose instead.
func ExampleStreamPublisher_Stream() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // not dialled here
	defer rdb.Close()
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithStreamPrefix("shop:"))
	fmt.Println(pub.Stream(&outbox.Envelope{Type: "order.created", Topic: "orders"}))
	fmt.Println(pub.Stream(&outbox.Envelope{Type: "user.signed_up"}))

	byTenant := outboxredis.NewStreamPublisher(rdb, outboxredis.WithStreamFunc(func(e *outbox.Envelope) string {
		return "tenant:" + e.TenantID
	}))
	fmt.Println(byTenant.Stream(&outbox.Envelope{Type: "order.created", TenantID: "acme"}))
	// Output:
	// shop:orders
	// shop:outbox
	// tenant:acme
}

// Bad options are reported by Validate, and so by relay.New.
func ExampleStreamPublisher_Validate() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // not dialled here
	defer rdb.Close()
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithMaxLen(-5))
	err := pub.Validate()
	fmt.Println(errors.Is(err, outboxredis.ErrInvalidOption))
	fmt.Println(err)
	// Output:
	// true
	// outboxredis: invalid option: max length -5 is negative
}
