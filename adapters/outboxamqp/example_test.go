package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/relay"
)

// A relay that publishes every committed event to a topic exchange, routed
// by event type, reconnecting by itself after a broker restart. (Needs
// RabbitMQ, so it is compiled, not run.)
func ExampleNewPublisher() {
	db, err := gorm.Open(sqlite.Open("file:shop.db?_txlock=immediate&_busy_timeout=5000"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	pub, err := outboxamqp.NewPublisher(nil, // the first publish dials
		outboxamqp.WithDial(outboxamqp.Dialer("amqp://guest:guest@localhost:5672/", amqp.Config{})),
		outboxamqp.WithRouting(func(e *outbox.Envelope) (string, string) { return "shop.events", e.Type }),
		outboxamqp.WithTopology(func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare("shop.events", amqp.ExchangeTopic, true, false, false, false, nil)
		}),
		outboxamqp.WithSource("shop-api"),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	r, err := relay.New(db, pub)
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
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		log.Fatal(err)
	}
	return db, store
}

// OrderPlaced is the payload of "order.placed" events in the examples.
type OrderPlaced struct {
	OrderID int     `json:"order_id"`
	Total   float64 `json:"total"`
}

// A consumer whose handler writes to the database exactly once per event,
// however often RabbitMQ delivers it, on a quorum queue bound to the
// events it wants, whose dead messages go to a dead-letter queue. The
// handler and the shared options are package consume's, the same on every
// broker; WithPrefetch and the WithConsumer… options are RabbitMQ's.
// (Needs RabbitMQ, so it is compiled, not run.)
func ExampleNewConsumer() {
	_, store := exampleStore("file:stats.db?_txlock=immediate&_busy_timeout=5000")
	countOrder := consume.IdempotentTx(store, "order-stats", consume.TxHandlerOf(func(ctx context.Context, tx *gorm.DB, o OrderPlaced) error {
		return tx.Exec("UPDATE stats SET orders = orders + 1, revenue = revenue + ?", o.Total).Error
	}))
	c, err := outboxamqp.NewConsumer(nil, "order-stats", countOrder,
		outboxamqp.WithConsumerDial(outboxamqp.Dialer("amqp://guest:guest@localhost:5672/", amqp.Config{})),
		outboxamqp.WithConsumerTopology(func(ch *amqp.Channel) error {
			if err := ch.ExchangeDeclare("shop.events", amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
				return err
			}
			if _, err := ch.QueueDeclare("order-stats.dead", true, false, false, false, nil); err != nil {
				return err
			}
			if _, err := ch.QueueDeclare("order-stats", true, false, false, false, amqp.Table{
				amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
				"x-delivery-limit":          20, // the broker's own bound, across consumers and restarts
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": "order-stats.dead",
			}); err != nil {
				return err
			}
			return ch.QueueBind("order-stats", "order.*", "shop.events", false, nil)
		}),
		outboxamqp.WithPrefetch(50),
		consume.WithConcurrency(4),
		consume.WithMaxDeliveries(5),
		consume.WithOnDead(func(ctx context.Context, d consume.DeadLetter) {
			m, _ := d.Delivery.Details.(outboxamqp.Message)
			log.Printf("dead message %s from queue %s: %v", m.MessageID, m.Queue, d.Reason)
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := c.Run(ctx); err != nil { // returns nil when ctx ends
		log.Fatal(err)
	}
}

// Bad arguments and options of a consumer, RabbitMQ's and consume's alike,
// are reported together by NewConsumer.
func ExampleNewConsumer_badOption() {
	h := consume.HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil })
	_, err := outboxamqp.NewConsumer(nil, "orders", h, outboxamqp.WithPrefetch(0), consume.WithMaxDeliveries(0))
	fmt.Println(errors.Is(err, consume.ErrInvalidOption))
	fmt.Println(err)
	// Output:
	// true
	// consume: invalid option: outboxamqp.WithPrefetch: prefetch 0 is not between 1 and 65535
	// consume: invalid option: outboxamqp: connection is nil and no DialFunc (WithConsumerDial) is given
	// consume: invalid option: max deliveries 0 is less than 1
}

// The dead-letter queue of a consumer, read page by page without taking
// its messages for good, and one message replayed to the exchange and
// routing key it was first published with. (Needs RabbitMQ.)
func ExampleNewDeadLetters() {
	conn, err := amqp.Dial("amqp://guest:guest@localhost:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	dl := outboxamqp.NewDeadLetters(conn, "order-stats.dead")
	ctx := context.Background()
	for cursor := ""; ; {
		page, next, err := dl.DeadLetters(ctx, cursor, 50)
		if err != nil {
			log.Fatal(err)
		}
		for _, m := range page {
			fmt.Println(m.ID, m.Source, m.DeadAt, m.Reason)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if _, err := dl.ReplayDead(ctx, "evt-42"); err != nil {
		log.Fatal(err)
	}
}

// Where each event goes: by default the default exchange, to the queue
// its Topic names; WithExchange and WithRouting choose otherwise.
func ExamplePublisher_Route() {
	conn := (*amqp.Connection)(nil) // not dialled here
	dial := outboxamqp.WithDial(outboxamqp.Dialer("amqp://localhost", amqp.Config{}))
	byTopic, _ := outboxamqp.NewPublisher(conn, dial)
	events, _ := outboxamqp.NewPublisher(conn, dial, outboxamqp.WithExchange("events"))
	byType, _ := outboxamqp.NewPublisher(conn, dial, outboxamqp.WithRouting(func(e *outbox.Envelope) (string, string) {
		return "events." + e.TenantID, e.Type
	}))
	e := &outbox.Envelope{Type: "order.created", Topic: "orders", TenantID: "acme"}
	for _, p := range []*outboxamqp.Publisher{byTopic, events, byType} {
		ex, key := p.Route(e)
		fmt.Printf("exchange %q, routing key %q\n", ex, key)
	}
	// Output:
	// exchange "", routing key "orders"
	// exchange "events", routing key "orders"
	// exchange "events.acme", routing key "order.created"
}

// Bad options are reported by NewPublisher, and by Validate for relay.New.
func ExampleNewPublisher_badOption() {
	_, err := outboxamqp.NewPublisher(nil, outboxamqp.WithRouting(nil))
	fmt.Println(errors.Is(err, outboxamqp.ErrInvalidOption))
	fmt.Println(err)
	// Output:
	// true
	// outboxamqp: invalid option: routing function is nil
	// outboxamqp: invalid option: connection is nil and no DialFunc (WithDial) is given
}
