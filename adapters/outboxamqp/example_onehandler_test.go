package outboxamqp_test

import (
	"context"
	"log"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/relay"
)

// The application's, in Example_oneHandler (compiled, not run), as in the
// README's examples for every broker.
var (
	db   *gorm.DB         // gorm.Open(…), with db.Use(&outbox.Plugin{})
	h    consume.Handler  // the README's handler: consume.IdempotentTx(store, "welcome", …)
	ctx  context.Context  // ends when the process stops
	conn *amqp.Connection // amqp.Dial("amqp://guest:guest@localhost:5672/")
)

// check stands for the application's error handling.
func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// try stands for the application's error handling of a call that
// returns a value.
func try[T any](v T, err error) T {
	check(err)
	return v
}

// The README's handler on RabbitMQ: the relay publishes a confirmed,
// persistent message per event, and a consumer of the queue runs the
// handler.
func Example_oneHandler() {
	pub := try(outboxamqp.NewPublisher(conn)) // a confirmed message per event, to the queue its Topic names
	r := try(relay.New(db, pub))
	go func() { check(r.Start(ctx)) }()
	c := try(outboxamqp.NewConsumer(conn, "users", h)) // a consumer of the queue users
	check(c.Run(ctx))
}
