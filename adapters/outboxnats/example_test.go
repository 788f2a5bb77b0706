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
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
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

	h := outboxnats.IdempotentTx(store, "order-stats", outboxnats.TxHandlerOf(
		func(ctx context.Context, tx *gorm.DB, o Order) error {
			if d, ok := outboxnats.DeliveryFrom(ctx); ok && d.Attempt > 1 {
				log.Printf("order %d: attempt %d of %d", o.ID, d.Attempt, d.MaxAttempts)
			}
			return tx.Exec("UPDATE stats SET orders = orders + 1, revenue = revenue + ?", o.Total).Error
		}))
	c, err := outboxnats.NewConsumer(js, "SHOP", "order-stats", h,
		outboxnats.WithFilterSubject("shop.orders"),
		outboxnats.WithMaxDeliveries(5),
		outboxnats.WithDeadLetterSubject("shop-dead.order-stats"), // captured by another stream
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

// HandlerOf decodes the payload into the handler's type; a payload that
// does not decode is a permanent failure, so the Consumer makes its message
// dead at once instead of retrying it.
func ExampleHandlerOf() {
	type Order struct{ ID, Total int }
	h := outboxnats.HandlerOf(func(ctx context.Context, o Order) error {
		e, _ := outboxnats.EnvelopeFrom(ctx)
		fmt.Printf("%s %s: order %d, total %d\n", e.Type, e.ID, o.ID, o.Total)
		return nil
	})
	ctx := context.Background()
	fmt.Println(h.Handle(ctx, &outbox.Envelope{ID: "evt-1", Type: "order.created", Payload: []byte(`{"ID":7,"Total":1999}`)}))

	err := h.Handle(ctx, &outbox.Envelope{ID: "evt-2", Type: "order.created", Payload: []byte(`"not an order"`)})
	fmt.Println("bad payload:", errors.Is(err, outboxnats.ErrBadPayload), "permanent:", outbox.IsPermanent(err))
	// Output:
	// order.created evt-1: order 7, total 1999
	// <nil>
	// bad payload: true permanent: true
}

// IdempotentTx runs a handler in a transaction in which its idempotency
// record commits too: delivered twice, or retried after a failure, the
// handler's writes happen once.
func ExampleIdempotentTx() {
	db, err := gorm.Open(sqlite.Open("file:nats-example?mode=memory&cache=shared&_txlock=immediate"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	type Shipment struct {
		ID      uint
		OrderID string
	}
	if err := errors.Join(outbox.Migrate(db), db.AutoMigrate(&Shipment{})); err != nil {
		log.Fatal(err)
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		log.Fatal(err)
	}

	runs := 0
	h := outboxnats.IdempotentTx(store, "shipping", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		runs++
		if err := tx.Create(&Shipment{OrderID: e.AggregateID}).Error; err != nil {
			return err
		}
		if runs == 1 {
			return errors.New("carrier API timed out") // rolls the shipment back; delivered again
		}
		return nil
	})
	e := &outbox.Envelope{ID: "evt-9", Type: "order.paid", AggregateType: "order", AggregateID: "9"}
	for range 3 { // a failure, its retry, then a duplicate delivery
		fmt.Println(h.Handle(context.Background(), e))
	}
	var shipments int64
	db.Model(&Shipment{}).Count(&shipments)
	fmt.Println("handler runs:", runs, "shipments:", shipments)
	// Output:
	// carrier API timed out
	// <nil>
	// <nil>
	// handler runs: 2 shipments: 1
}
