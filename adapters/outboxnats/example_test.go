package outboxnats_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/relay"
)

// A worker process relays committed events to JetStream: the Topic
// "orders" goes to the subject "shop.orders", which the stream SHOP
// captures. (It needs NATS and PostgreSQL, so it is compiled, not run.)
func ExampleNewPublisher() {
	db, err := gorm.Open(postgres.Open("postgres://localhost/shop"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(nats.DefaultURL, nats.MaxReconnects(-1)) // reconnect for ever
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// The duplicate window must outlast any redelivery by the relay.
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "SHOP", Subjects: []string{"shop.>"}, Storage: jetstream.FileStorage, Duplicates: time.Hour,
	}); err != nil {
		log.Fatal(err)
	}

	pub, err := outboxnats.NewPublisher(js,
		outboxnats.WithSubjectPrefix("shop."),
		outboxnats.WithExpectStream("SHOP"), // refuse subjects another stream captures
		outboxnats.WithSource("shop-api"),
	)
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(db, pub)
	if err != nil {
		log.Fatal(err)
	}
	if err := r.Start(ctx); err != nil { // until ctx ends
		log.Fatal(err)
	}
}

// A consumer process counts orders, exactly once per event, and sends what
// cannot be handled to a dead-letter subject. (It needs NATS and
// PostgreSQL, so it is compiled, not run.)
func ExampleNewConsumer() {
	type Order struct {
		ID    int
		Total int
	}
	db, err := gorm.Open(postgres.Open("postgres://localhost/stats"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(nats.DefaultURL, nats.MaxReconnects(-1))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}

	// The handler and the shared options are package consume's, the same
	// on every broker; the With… options of outboxnats are JetStream's.
	h := consume.IdempotentTx(store, "order-stats", consume.TxHandlerOf(
		func(ctx context.Context, tx *gorm.DB, o Order) error {
			if d, ok := consume.DeliveryFrom(ctx); ok && d.Attempt > 1 {
				m, _ := d.Details.(outboxnats.Message)
				log.Printf("order %d: attempt %d of %d (delivered %d times)", o.ID, d.Attempt, d.MaxAttempts, m.NumDelivered)
			}
			return tx.Exec("UPDATE stats SET orders = orders + 1, revenue = revenue + ?", o.Total).Error
		}))
	c, err := outboxnats.NewConsumer(js, "SHOP", "order-stats", h,
		outboxnats.WithFilterSubject("shop.orders"),
		outboxnats.WithDeadLetterSubject("shop-dead.order-stats"), // captured by another stream
		outboxnats.WithBatch(50),
		consume.WithConcurrency(4),
		consume.WithMaxDeliveries(5),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Bad arguments and options of a consumer, JetStream's and consume's
// alike, are reported together by NewConsumer.
func ExampleNewConsumer_badOption() {
	h := consume.HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil })
	_, err := outboxnats.NewConsumer(nil, "SHOP", "stats", h, outboxnats.WithAckWait(0), consume.WithMaxDeliveries(0))
	fmt.Println(errors.Is(err, consume.ErrInvalidOption))
	fmt.Println(err)
	// Output:
	// true
	// consume: invalid option: outboxnats.WithAckWait: ack wait 0s is shorter than 1s
	// consume: invalid option: outboxnats: nil JetStream
	// consume: invalid option: max deliveries 0 is less than 1
}

// The dead letters of the consumers whose WithDeadLetterSubject is under
// "shop-dead.", read page by page from the stream that captures them, and
// one replayed to the subject it went dead from. (Needs NATS.)
func ExampleNewDeadLetters() {
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	dl := outboxnats.NewDeadLetters(js, "SHOP-DEAD", "shop-dead.>")
	ctx := context.Background()
	for cursor := ""; ; {
		page, next, err := dl.DeadLetters(ctx, cursor, 50)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range page {
			fmt.Println(m.ID, m.Source, m.Deliveries, m.Reason)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if _, err := dl.ReplayDead(ctx, "42"); err != nil { // its sequence in SHOP-DEAD
		log.Fatal(err)
	}
}
