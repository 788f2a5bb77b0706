package outboxkafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

const benchEvents = 20000

func benchEvent(topic string) func(i int) outbox.Event {
	return func(i int) outbox.Event {
		return outbox.Event{Type: "bench.event", Topic: topic, AggregateType: "order", AggregateID: fmt.Sprint(i),
			Payload: map[string]any{"i": i, "customer": "customer-0042", "total": 1999, "currency": "EUR"}}
	}
}

// BenchmarkRelayToKafka measures events per second relayed from each
// database into a kfake cluster of 3 brokers (a topic of 6 partitions)
// through the Publisher (20,000 events per run, a relay with a fixed batch
// size), against a direct franz-go produce loop of the same records
// ("direct": built beforehand, a batch at a time, each batch's promises
// awaited before the next), and against the relay with a publisher that
// does nothing ("noop": the relay's own limit, the database's work). The
// ratios are the adapter's overhead; kfake's absolute rates mean nothing.
// The relay cannot be faster than either: relay/direct is at most
// noop/direct, far below 1 where kfake takes records much faster than a
// database gives them up. "relay/serial" compares the relay with the
// database's work and the produce loop done one after the other (the rate
// of noop and direct added in series): above 1, the relay overlaps them.
//
//	go test -run '^$' -bench BenchmarkRelayToKafka -benchtime 1x
func BenchmarkRelayToKafka(b *testing.B) {
	c := newFake(b)
	for _, dialect := range testenv.Dialects {
		for _, bc := range []struct {
			batch  int
			linger time.Duration
		}{{100, 0}, {1000, 0}, {100, 10 * time.Millisecond}} {
			b.Run(fmt.Sprintf("%s/batch=%d/linger=%v", dialect, bc.batch, bc.linger), func(b *testing.B) {
				cl := c.client(b, kgo.ProducerLinger(bc.linger))
				var relayTook, directTook, noopTook time.Duration
				for range b.N {
					b.StopTimer()
					topic := c.topic(b, 6, nil)
					db, _ := outboxDB(b, dialect)
					testenv.Emit(b, db, benchEvents, benchEvent(topic))
					pub := newPublisher(b, cl)
					recs := directRecords(b, db, pub)
					b.StartTimer()
					relayTook += relayAll(b, db, pub, bc.batch)
					b.StopTimer()
					directTook += produceDirect(b, cl, recs, bc.batch)

					db, _ = outboxDB(b, dialect)
					testenv.Emit(b, db, benchEvents, benchEvent(topic))
					noopTook += relayAll(b, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }), bc.batch)
				}
				rel, dir, noop := rate(b.N*benchEvents, relayTook), rate(b.N*benchEvents, directTook), rate(b.N*benchEvents, noopTook)
				b.ReportMetric(rel, "relay-events/s")
				b.ReportMetric(dir, "direct-events/s")
				b.ReportMetric(noop, "noop-events/s")
				b.ReportMetric(rel/dir, "relay/direct")
				b.ReportMetric(rel/noop, "relay/noop")
				b.ReportMetric(rel*(1/noop+1/dir), "relay/serial")
			})
		}
	}
}

func rate(n int, d time.Duration) float64 { return float64(n) / d.Seconds() }

// directRecords builds, from the stored events, the records the Publisher
// produces for them.
func directRecords(b *testing.B, db *gorm.DB, pub *outboxkafka.Publisher) []*kgo.Record {
	b.Helper()
	var rows []outbox.OutboxEvent
	must(b, db.Order("id").Find(&rows).Error)
	recs := make([]*kgo.Record, len(rows))
	for i, r := range rows {
		e := &outbox.Envelope{ID: r.EventID, Type: r.Type, Topic: r.Topic, AggregateType: r.AggregateType,
			AggregateID: r.AggregateID, Attempt: 1, Payload: r.Payload, CreatedAt: r.CreatedAt}
		var err error
		recs[i], err = outboxkafka.NewPublisherRecord(pub, e)
		must(b, err)
	}
	return recs
}

// produceDirect produces recs, batch at a time, awaiting each batch's
// promises, and returns the time taken.
func produceDirect(b *testing.B, cl *kgo.Client, recs []*kgo.Record, batch int) time.Duration {
	b.Helper()
	start := time.Now()
	for off := 0; off < len(recs); off += batch {
		end := min(len(recs), off+batch)
		done := make(chan error, end-off)
		for _, r := range recs[off:end] {
			cl.Produce(context.Background(), r, func(_ *kgo.Record, err error) { done <- err })
		}
		for range end - off {
			must(b, <-done)
		}
	}
	return time.Since(start)
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

// BenchmarkPublisherAlone measures the Publisher without the relay's
// database work: PublishBatch of the envelopes of 20,000 events, a batch
// at a time (their CloudEvents JSON encoded on the way), against the
// direct produce loop of BenchmarkRelayToKafka of the same records, built
// beforehand ("direct"), and against that loop building each batch's
// records as it goes ("direct-encoding": what a hand-written producer of
// these records does), in one run: the adapter's own cost.
//
//	go test -run '^$' -bench BenchmarkPublisherAlone -benchtime 5x
func BenchmarkPublisherAlone(b *testing.B) {
	c := newFake(b)
	db, _ := outboxDB(b, testenv.SQLite)
	topic := c.topic(b, 6, nil)
	testenv.Emit(b, db, benchEvents, benchEvent(topic))
	var rows []outbox.OutboxEvent
	must(b, db.Order("id").Find(&rows).Error)
	envs := make([]*outbox.Envelope, len(rows))
	for i, r := range rows {
		envs[i] = &outbox.Envelope{ID: r.EventID, Type: r.Type, Topic: r.Topic, AggregateType: r.AggregateType,
			AggregateID: r.AggregateID, Attempt: 1, Payload: r.Payload, CreatedAt: r.CreatedAt}
	}
	for _, batch := range []int{100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			cl := c.client(b, kgo.ProducerLinger(0))
			pub := newPublisher(b, cl)
			recs := directRecords(b, db, pub)
			var pubTook, directTook, encodingTook time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				for off := 0; off < len(envs); off += batch {
					for _, err := range pub.PublishBatch(context.Background(), envs[off:min(len(envs), off+batch)]) {
						must(b, err)
					}
				}
				pubTook += time.Since(start)
				directTook += produceDirect(b, cl, recs, batch)
				start = time.Now()
				for off := 0; off < len(envs); off += batch {
					built := make([]*kgo.Record, 0, batch)
					for _, e := range envs[off:min(len(envs), off+batch)] {
						r, err := outboxkafka.NewPublisherRecord(pub, e)
						must(b, err)
						built = append(built, r)
					}
					produceDirect(b, cl, built, batch)
				}
				encodingTook += time.Since(start)
			}
			p, d, de := rate(b.N*benchEvents, pubTook), rate(b.N*benchEvents, directTook), rate(b.N*benchEvents, encodingTook)
			b.ReportMetric(p, "publisher-events/s")
			b.ReportMetric(d, "direct-events/s")
			b.ReportMetric(de, "direct-encoding-events/s")
			b.ReportMetric(p/d, "publisher/direct")
			b.ReportMetric(p/de, "publisher/direct-encoding")
		})
	}
}
