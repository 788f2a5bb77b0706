package outboxnats_test

import (
	"context"
	"log"

	"github.com/nats-io/nats.go/jetstream"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/relay"
)

// The application's, in Example_oneHandler (compiled, not run), as in the
// README's examples for every broker.
var (
	db  *gorm.DB            // gorm.Open(…), with db.Use(&outbox.Plugin{})
	h   consume.Handler     // the README's handler: consume.IdempotentTx(store, "welcome", …)
	ctx context.Context     // ends when the process stops
	js  jetstream.JetStream // jetstream.New(nc), nc from nats.Connect(url)
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

// The README's handler on NATS JetStream: the relay publishes a message
// per event, and a durable pull consumer of the stream runs the handler.
func Example_oneHandler() {
	pub := try(outboxnats.NewPublisher(js)) // a message per event on its Topic's subject; Nats-Msg-Id = event id
	r := try(relay.New(db, pub))
	go func() { check(r.Start(ctx)) }()
	c := try(outboxnats.NewConsumer(js, "USERS", "mail", h)) // the durable consumer mail of the stream USERS
	check(c.Run(ctx))
}
