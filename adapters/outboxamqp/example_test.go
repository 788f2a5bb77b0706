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

// A consumer whose handler writes to the database exactly once per event,
// however often RabbitMQ delivers it, on a quorum queue bound to the
// events it wants, whose dead messages go to a dead-letter queue. (Needs
// RabbitMQ.)
func ExampleNewConsumer() {
	_, store := exampleStore("file:stats.db?_txlock=immediate&_busy_timeout=5000")
	countOrder := outboxamqp.IdempotentTx(store, "order-stats", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		var order struct{ Total float64 }
		if err := e.Unmarshal(&order); err != nil {
			return outbox.Permanent(err) // a bad payload never gets better: dead-letter it
		}
		return tx.Exec("UPDATE stats SET orders = orders + 1, revenue = revenue + ?", order.Total).Error
	})
	c, err := outboxamqp.NewConsumer(nil, "order-stats", countOrder,
		outboxamqp.WithDial(outboxamqp.Dialer("amqp://guest:guest@localhost:5672/", amqp.Config{})),
		outboxamqp.WithTopology(func(ch *amqp.Channel) error {
			if err := ch.ExchangeDeclare("shop.events", amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
				return err
			}
			if _, err := ch.QueueDeclare("order-stats.dead", true, false, false, false, nil); err != nil {
				return err
			}
			if _, err := ch.QueueDeclare("order-stats", true, false, false, false, amqp.Table{
				amqp.QueueTypeArg:           amqp.QueueTypeQuorum,
				"x-dead-letter-exchange":    "",
				"x-dead-letter-routing-key": "order-stats.dead",
			}); err != nil {
				return err
			}
			return ch.QueueBind("order-stats", "order.*", "shop.events", false, nil)
		}),
		outboxamqp.WithConcurrency(4),
		outboxamqp.WithOnDead(func(ctx context.Context, d outboxamqp.DeadMessage) {
			log.Printf("dead message %s: %v", d.Message.MessageId, d.Reason)
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

// OrderPlaced is the payload of "order.placed" events in the examples.
type OrderPlaced struct {
	OrderID int    `json:"order_id"`
	Email   string `json:"email"`
}

// A handler of the decoded payload. A payload that does not decode into
// the type is a permanent failure: the message is dead at once. (Called
// directly here; a Consumer calls it for each message.)
func ExampleHandlerOf() {
	h := outboxamqp.HandlerOf(func(ctx context.Context, o OrderPlaced) error {
		e, _ := outboxamqp.EnvelopeFrom(ctx)
		fmt.Printf("event %s: receipt for order %d to %s\n", e.ID, o.OrderID, o.Email)
		return nil
	})
	ctx := context.Background()
	fmt.Println(h.Handle(ctx, &outbox.Envelope{ID: "evt-1", Type: "order.placed", Payload: []byte(`{"order_id":42,"email":"ann@example.com"}`)}))

	err := h.Handle(ctx, &outbox.Envelope{ID: "evt-2", Type: "order.placed", Payload: []byte(`["not", "an", "order"]`)})
	fmt.Println("bad payload:", errors.Is(err, outboxamqp.ErrBadPayload), "permanent:", outbox.IsPermanent(err))
	// Output:
	// event evt-1: receipt for order 42 to ann@example.com
	// <nil>
	// bad payload: true permanent: true
}

// A typed handler whose writes commit with its idempotency record, and
// that reads which counted attempt it is on. (Needs RabbitMQ and a
// database.)
func ExampleTxHandlerOf() {
	_, store := exampleStore("file:stats.db?_txlock=immediate&_busy_timeout=5000")
	h := outboxamqp.IdempotentTx(store, "customer-stats", outboxamqp.TxHandlerOf(func(ctx context.Context, tx *gorm.DB, o OrderPlaced) error {
		if d, _ := outboxamqp.DeliveryFrom(ctx); d.LastAttempt() {
			log.Printf("last attempt for order %d (delivery %d)", o.OrderID, d.DeliveryTag)
		}
		return tx.Exec("UPDATE customers SET orders = orders + 1 WHERE email = ?", o.Email).Error
	}))
	_ = h // outboxamqp.NewConsumer(conn, "customer-stats", h)
}
