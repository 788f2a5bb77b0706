package outboxasynq_test

import (
	"context"
	"log"

	"github.com/hibiken/asynq"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/relay"
)

// The application's, in Example_oneHandler (compiled, not run), as in the
// README's examples for every broker.
var (
	db       *gorm.DB             // gorm.Open(…), with db.Use(&outbox.Plugin{})
	h        consume.Handler      // the README's handler: consume.IdempotentTx(store, "welcome", …)
	ctx      context.Context      // ends when the process stops
	redisOpt asynq.RedisClientOpt // asynq.RedisClientOpt{Addr: "localhost:6379"}
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

// The README's handler behind an asynq server: the relay enqueues a task
// per event, and Handler runs the handler with package consume's policy.
func Example_oneHandler() {
	r := try(relay.New(db, outboxasynq.NewPublisher(asynq.NewClient(redisOpt)))) // a task per event; TaskID = event id
	go func() { check(r.Start(ctx)) }()
	mux := asynq.NewServeMux() // asynq's server, running h with package consume's policy
	mux.Handle("user.signed_up", outboxasynq.Handler(h))
	srv := asynq.NewServer(redisOpt, asynq.Config{Queues: map[string]int{"users": 1}, // the queue the Topic names
		IsFailure: outboxasynq.IsFailure, RetryDelayFunc: outboxasynq.RetryDelay(nil)})
	check(srv.Run(mux))
}
