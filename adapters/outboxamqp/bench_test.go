package outboxamqp_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

const benchEvents = 20000

func benchEvent(q string) func(i int) outbox.Event {
	return func(i int) outbox.Event {
		return outbox.Event{Type: "bench.event", Topic: q, AggregateType: "order", AggregateID: fmt.Sprint(i),
			Payload: map[string]any{"i": i, "customer": "customer-0042", "total": 1999, "currency": "EUR"}}
	}
}

// BenchmarkRelayToRabbitMQ measures events per second relayed from
// PostgreSQL to RabbitMQ through the Publisher (20,000 events per run),
// against the same publishes made directly in a loop ("direct": the same
// messages, JSON encoded beforehand, published mandatory and persistent on
// one confirm-mode channel, a batch at a time, each batch's confirms
// awaited before the next), and against the relay with a publisher that
// does nothing ("noop": the relay's own limit).
//
//	go test -run '^$' -bench . -benchtime 1x ./...
func BenchmarkRelayToRabbitMQ(b *testing.B) {
	conn := dial(b)
	for _, batch := range []int{relay.DefaultBatchSize, 500} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			var relayTook, directTook, noopTook time.Duration
			for range b.N {
				b.StopTimer()
				q := queue(b, "bench", nil)
				db, _ := outboxDB(b, testenv.Postgres)
				testenv.Emit(b, db, benchEvents, benchEvent(q))
				msgs := directMessages(b, db)
				b.StartTimer()
				relayTook += relayAll(b, db, newPublisher(b, conn), batch)
				b.StopTimer()
				purge(b, q)
				directTook += publishDirect(b, conn, q, msgs, batch)
				purge(b, q)

				db, _ = outboxDB(b, testenv.Postgres)
				testenv.Emit(b, db, benchEvents, benchEvent(q))
				noopTook += relayAll(b, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }), batch)
			}
			rel, dir := rate(b.N*benchEvents, relayTook), rate(b.N*benchEvents, directTook)
			b.ReportMetric(rel, "relay-events/s")
			b.ReportMetric(dir, "direct-events/s")
			b.ReportMetric(rel/dir, "relay/direct")
			b.ReportMetric(rate(b.N*benchEvents, noopTook), "relay-noop-events/s")
		})
	}
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// directMessages builds, from the stored events, the messages the
// Publisher sends.
func directMessages(b *testing.B, db *gorm.DB) []amqp.Publishing {
	b.Helper()
	var rows []outbox.OutboxEvent
	must(b, db.Order("id").Find(&rows).Error)
	msgs := make([]amqp.Publishing, len(rows))
	for i, r := range rows {
		e := &outbox.Envelope{ID: r.EventID, Type: r.Type, Topic: r.Topic, AggregateType: r.AggregateType,
			AggregateID: r.AggregateID, Attempt: 1, Payload: r.Payload, Source: outbox.DefaultSource, CreatedAt: r.CreatedAt}
		body, err := e.MarshalJSON()
		must(b, err)
		msgs[i] = amqp.Publishing{
			ContentType: outboxamqp.ContentType, DeliveryMode: amqp.Persistent, MessageId: e.ID, Type: e.Type,
			AppId: e.Source, Timestamp: e.CreatedAt, Body: body,
			Headers: amqp.Table{outboxamqp.HeaderEventType: e.Type, outboxamqp.HeaderAggregateType: e.AggregateType, outboxamqp.HeaderAggregateID: e.AggregateID},
		}
	}
	return msgs
}

// publishDirect publishes msgs to q on one confirm channel, batch at a
// time, waiting for each batch's confirms, and returns the time taken.
func publishDirect(b *testing.B, conn *amqp.Connection, q string, msgs []amqp.Publishing, batch int) time.Duration {
	b.Helper()
	ch, err := conn.Channel()
	must(b, err)
	defer ch.Close()
	must(b, ch.Confirm(false))
	start := time.Now()
	dcs := make([]*amqp.DeferredConfirmation, 0, batch)
	for off := 0; off < len(msgs); off += batch {
		dcs = dcs[:0]
		for _, m := range msgs[off:min(len(msgs), off+batch)] {
			dc, err := ch.PublishWithDeferredConfirm("", q, true, false, m)
			must(b, err)
			dcs = append(dcs, dc)
		}
		for _, dc := range dcs {
			if !dc.Wait() {
				b.Fatal("nacked")
			}
		}
	}
	d := time.Since(start)
	if n := depth(b, q); n != len(msgs) {
		b.Fatalf("direct: %d messages in the queue, want %d", n, len(msgs))
	}
	return d
}

// relayAll runs a relay until every event is published and returns how
// long it took.
func relayAll(b *testing.B, db *gorm.DB, pub relay.Publisher, batch int) time.Duration {
	b.Helper()
	r, err := relay.New(db, pub, relay.WithLogger(testLogger(b)), relay.WithBatchSize(batch))
	must(b, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- r.Start(ctx) }()
	for countStatus(b, db, outbox.StatusPublished) < benchEvents {
		time.Sleep(5 * time.Millisecond)
	}
	d := time.Since(start)
	cancel()
	must(b, <-done)
	return d
}

func purge(b *testing.B, q string) {
	b.Helper()
	_, err := admin(b).QueuePurge(q, false)
	must(b, err)
}

// BenchmarkPublisherAlone measures the Publisher without the relay's
// database work: PublishBatch of the envelopes of 20,000 events, 100 at a
// time (JSON encoding included), against the direct loop of
// BenchmarkRelayToRabbitMQ, in one run.
func BenchmarkPublisherAlone(b *testing.B) {
	const batch = relay.DefaultBatchSize
	conn := dial(b)
	q := queue(b, "bench-pub", nil)
	db, _ := outboxDB(b, testenv.SQLite)
	testenv.Emit(b, db, benchEvents, benchEvent(q))
	msgs := directMessages(b, db)
	var rows []outbox.OutboxEvent
	must(b, db.Order("id").Find(&rows).Error)
	envs := make([]*outbox.Envelope, len(rows))
	for i, r := range rows {
		envs[i] = &outbox.Envelope{ID: r.EventID, Type: r.Type, Topic: r.Topic, AggregateType: r.AggregateType,
			AggregateID: r.AggregateID, Attempt: 1, Payload: r.Payload, CreatedAt: r.CreatedAt}
	}
	pub := newPublisher(b, conn)
	var pubTook, directTook time.Duration
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		for off := 0; off < len(envs); off += batch {
			for _, err := range pub.PublishBatch(context.Background(), envs[off:min(len(envs), off+batch)]) {
				must(b, err)
			}
		}
		pubTook += time.Since(start)
		b.StopTimer()
		purge(b, q)
		directTook += publishDirect(b, conn, q, msgs, batch)
		purge(b, q)
		b.StartTimer()
	}
	p, d := rate(b.N*benchEvents, pubTook), rate(b.N*benchEvents, directTook)
	b.ReportMetric(p, "publisher-events/s")
	b.ReportMetric(d, "direct-events/s")
	b.ReportMetric(p/d, "publisher/direct")
}
