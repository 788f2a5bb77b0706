package outboxkafka_test

import (
	"context"
	"log"

	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/relay"
)

// The application's, in Example_oneHandler (compiled, not run), as in the
// README's examples for every broker.
var (
	db    *gorm.DB        // gorm.Open(…), with db.Use(&outbox.Plugin{})
	h     consume.Handler // the README's handler: consume.IdempotentTx(store, "welcome", …)
	ctx   context.Context // ends when the process stops
	kafka []kgo.Opt       // []kgo.Opt{kgo.SeedBrokers("kafka-1:9092", "kafka-2:9092")}
	cl    *kgo.Client     // kgo.NewClient(kafka...)
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

// The README's handler on Kafka: the relay produces a record per event,
// keyed by its partition key, and a member of a consumer group runs the
// handler.
func Example_oneHandler() {
	pub := try(outboxkafka.NewPublisher(cl)) // a record per event, to its Topic, keyed by its partition key
	r := try(relay.New(db, pub))
	go func() { check(r.Start(ctx)) }()
	c := try(outboxkafka.NewConsumer(kafka, "users", "mail", h)) // a member of the consumer group mail
	check(c.Run(ctx))
}
