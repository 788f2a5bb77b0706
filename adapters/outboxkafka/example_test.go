package outboxkafka_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// An order's events, committed with the order, relayed to the topic
// "orders" in commit order (their partition key keeps them on one
// partition), and read back by a consumer. The attempt log keeps each
// event's receipt: where it went. It runs against kfake, an in-process
// Kafka cluster; give kgo.SeedBrokers your brokers instead.
func ExampleNewPublisher() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()

	db, err := gorm.Open(testenv.SQLiteDialector("file:kafka-example?mode=memory&cache=shared&_txlock=immediate"),
		&gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	err = db.Transaction(func(tx *gorm.DB) error { // the order and its events commit together
		return outbox.Emit(tx,
			outbox.Event{ID: "ev-1", Type: "order.created", Topic: "orders", PartitionKey: "order-42", Payload: map[string]int{"total": 1999}},
			outbox.Event{ID: "ev-2", Type: "order.paid", Topic: "orders", PartitionKey: "order-42", Payload: map[string]int{"total": 1999}})
	})
	if err != nil {
		log.Fatal(err)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ProducerLinger(0))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	pub, err := outboxkafka.NewPublisher(cl, outboxkafka.WithSource("shop-api"))
	if err != nil {
		log.Fatal(err)
	}
	r, err := relay.New(db, pub, relay.WithAttemptLog())
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for n := 0; n < 2; { // a worker would run r.Start(ctx)
		res, err := r.RunOnce(ctx)
		if err != nil {
			log.Fatal(err)
		}
		n += res.Published
	}
	insp, err := relay.NewInspector(db)
	if err != nil {
		log.Fatal(err)
	}
	attempts, err := insp.Attempts(ctx, "ev-2")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ev-2:", attempts[0].Outcome, "to", attempts[0].Receipt)

	consumer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	for n := 0; n < 2; {
		consumer.PollFetches(ctx).EachRecord(func(rec *kgo.Record) {
			e, err := outbox.DecodeEnvelope(rec.Value) // the CloudEvents JSON
			if err != nil {
				log.Fatal(err)
			}
			fmt.Printf("%s/%d key %s: %s %s from %s %s\n", rec.Topic, rec.Partition, rec.Key, e.ID, e.Type, e.Source, e.Payload)
			n++
		})
	}
	// Output:
	// ev-2: published to orders/0@1
	// orders/0 key order-42: ev-1 order.created from shop-api {"total":1999}
	// orders/0 key order-42: ev-2 order.paid from shop-api {"total":1999}
}

// A consumer group reading the topic "orders": a typed handler gets each
// order event's payload, in commit order per partition, and a record its
// handler refuses for good goes to the dead-letter topic "orders.dead",
// where NewDeadLetters reads it. It runs against kfake, an in-process
// Kafka cluster; give kgo.SeedBrokers your brokers instead.
func ExampleNewConsumer() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders", "orders.dead"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	client := []kgo.Opt{kgo.SeedBrokers(cluster.ListenAddrs()...)}

	cl, err := kgo.NewClient(append(client, kgo.ProducerLinger(0))...)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	pub, err := outboxkafka.NewPublisher(cl) // a relay publishes through it; here by hand
	if err != nil {
		log.Fatal(err)
	}
	for i, total := range []int{1999, -5, 2500} {
		e := &outbox.Envelope{ID: fmt.Sprint("ev-", i+1), Type: "order.paid", Topic: "orders", PartitionKey: "order-42",
			Payload: fmt.Append(nil, `{"total":`, total, `}`)}
		if err := pub.Publish(context.Background(), e); err != nil {
			log.Fatal(err)
		}
	}

	type paid struct{ Total int }
	ctx, stop := context.WithCancel(context.Background())
	handled := 0
	h := consume.HandlerOf(func(ctx context.Context, o paid) error {
		defer func() {
			if handled++; handled == 3 {
				stop()
			}
		}()
		if o.Total < 0 {
			return outbox.Permanent(fmt.Errorf("negative total %d", o.Total))
		}
		d, _ := consume.DeliveryFrom(ctx)
		rec := d.Details.(outboxkafka.Record)
		fmt.Printf("paid %d (%s/%d@%d, attempt %d)\n", o.Total, rec.Topic, rec.Partition, rec.Offset, d.Attempt)
		return nil
	})
	c, err := outboxkafka.NewConsumer(client, "orders", "billing", h,
		outboxkafka.WithDeadLetterTopic("orders.dead"),
		consume.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	if err := c.Run(ctx); err != nil { // until ctx ends
		log.Fatal(err)
	}

	dead, _, err := outboxkafka.NewDeadLetters(client, "orders.dead").DeadLetters(context.Background(), "", 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, m := range dead {
		fmt.Printf("dead: %s from %s: %s\n", m.Envelope.ID, m.Source, m.Reason)
	}
	// Output:
	// paid 1999 (orders/0@0, attempt 1)
	// paid 2500 (orders/0@2, attempt 1)
	// dead: ev-2 from orders (group billing): permanent: negative total -5
}
