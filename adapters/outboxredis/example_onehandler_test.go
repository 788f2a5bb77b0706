package outboxredis_test

import (
	"context"
	"log"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/relay"
)

// The application's, in Example_oneHandler (compiled, not run), as in the
// README's examples for every broker.
var (
	db  *gorm.DB        // gorm.Open(…), with db.Use(&outbox.Plugin{})
	h   consume.Handler // the README's handler: consume.IdempotentTx(store, "welcome", …)
	ctx context.Context // ends when the process stops
	rdb *redis.Client   // redis.NewClient(&redis.Options{Addr: "localhost:6379"})
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

// The README's handler on Redis Streams: the relay appends an entry per
// event, and a consumer of a group runs the handler.
func Example_oneHandler() {
	r := try(relay.New(db, outboxredis.NewStreamPublisher(rdb))) // an entry per event, in the stream its Topic names
	go func() { check(r.Start(ctx)) }()
	c := try(outboxredis.NewConsumer(rdb, "users", "mail", "worker-1", h)) // consumer worker-1 of the group mail
	check(c.Run(ctx))
}
