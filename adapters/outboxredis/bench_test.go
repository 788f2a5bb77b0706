package outboxredis_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// donePublisher closes done once target events were delivered.
type donePublisher struct {
	relay.BatchPublisher
	target int64
	n      atomic.Int64
	once   sync.Once
	done   chan struct{}
}

func (p *donePublisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := p.BatchPublisher.PublishBatch(ctx, es)
	ok := int64(0)
	for _, err := range errs {
		if err == nil {
			ok++
		}
	}
	if p.n.Add(ok) >= p.target {
		p.once.Do(func() { close(p.done) })
	}
	return errs
}

// noopPublisher is a BatchPublisher that delivers nowhere: the relay's
// database work alone.
type noopPublisher struct{}

func (noopPublisher) Publish(context.Context, *outbox.Envelope) error { return nil }
func (noopPublisher) PublishBatch(_ context.Context, es []*outbox.Envelope) []error {
	return make([]error, len(es))
}

// BenchmarkRelayToStream relays 50,000 events from PostgreSQL into a Redis
// stream (PublishBatch, one pipeline per claimed batch of 500) and compares
// the rate with the same XADDs sent straight from a loop in pipelines of
// the same size: relay-events/s, raw-events/s and relay/raw. It also drains
// the same backlog through a publisher that does nothing
// (relay-noop-events/s), the ceiling set by the relay's database work.
//
//	go test -run '^$' -bench RelayToStream ./adapters/outboxredis
func BenchmarkRelayToStream(b *testing.B) {
	const events, batch = 50_000, 500
	rdb := newRedis(b)
	ctx := context.Background()
	var relayTime, noopTime, rawTime time.Duration
	for range b.N {
		stream := streamName(b, rdb, "bench-relay")
		relayTime += drainRelay(b, events, batch, stream, outboxredis.NewStreamPublisher(rdb))
		if n := rdb.XLen(ctx, stream).Val(); n != events {
			b.Fatalf("stream holds %d entries, want %d", n, events)
		}
		must(b, rdb.Del(ctx, stream).Err())
		noopTime += drainRelay(b, events, batch, "noop", noopPublisher{})
		b.StopTimer()
		rawTime += rawXAdds(b, rdb, events, batch)
	}
	relayRate := float64(events*b.N) / relayTime.Seconds()
	rawRate := float64(events*b.N) / rawTime.Seconds()
	b.ReportMetric(relayRate, "relay-events/s")
	b.ReportMetric(rawRate, "raw-events/s")
	b.ReportMetric(relayRate/rawRate, "relay/raw")
	b.ReportMetric(float64(events*b.N)/noopTime.Seconds(), "relay-noop-events/s")
}

// drainRelay writes events of topic to a fresh PostgreSQL database and
// returns how long one relay takes to deliver them all through pub (the
// benchmark's timer runs only meanwhile).
func drainRelay(b *testing.B, events, batch int, topic string, pub relay.BatchPublisher) time.Duration {
	b.Helper()
	b.StopTimer()
	db, _ := outboxDB(b, testenv.Postgres)
	emitN(b, db, events, topic)
	counted := &donePublisher{BatchPublisher: pub, target: int64(events), done: make(chan struct{})}
	r, err := relay.New(db, counted, relay.WithBatchSize(batch), relay.WithLogger(testLogger(b)))
	must(b, err)

	b.StartTimer()
	start := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(ctx) }()
	select {
	case <-counted.done:
	case <-time.After(5 * time.Minute):
		b.Fatal("relay did not finish within 5 minutes")
	}
	cancel()
	must(b, <-stopped) // Start records the last batch before it returns
	d := time.Since(start)
	b.StopTimer()
	return d
}

// rawXAdds appends n entries like the publisher's (same fields, JSON
// encoded beforehand) in pipelines of batch, and returns the time taken.
func rawXAdds(b *testing.B, rdb *redis.Client, n, batch int) time.Duration {
	b.Helper()
	ctx := context.Background()
	stream := streamName(b, rdb, "bench-raw")
	defer func() { must(b, rdb.Del(ctx, stream).Err()) }()
	values := make([][]any, n)
	for i := range values {
		e := &outbox.Envelope{
			ID: fmt.Sprintf("ev-%06d", i), Type: "order.created", Topic: stream, Source: outbox.DefaultSource,
			AggregateType: "order", AggregateID: fmt.Sprint(i), Attempt: 1,
			Payload: []byte(fmt.Sprintf(`{"i": %d}`, i)), CreatedAt: time.Now(),
		}
		body, err := e.MarshalJSON()
		must(b, err)
		values[i] = []any{outboxredis.FieldEvent, body, outboxredis.FieldID, e.ID, outboxredis.FieldType, e.Type}
	}
	start := time.Now()
	for off := 0; off < n; off += batch {
		pipe := rdb.Pipeline()
		cmds := make([]*redis.StringCmd, 0, batch)
		for i := off; i < min(n, off+batch); i++ {
			cmds = append(cmds, pipe.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: values[i]}))
		}
		_, _ = pipe.Exec(ctx)
		for _, c := range cmds {
			must(b, c.Err())
		}
	}
	d := time.Since(start)
	if got := rdb.XLen(ctx, stream).Val(); got != int64(n) {
		b.Fatalf("raw stream holds %d entries, want %d", got, n)
	}
	return d
}

// BenchmarkPublishBatch measures the publisher alone, without the relay's
// database work: PublishBatch of 500 envelopes (JSON encoding included),
// as events per second.
func BenchmarkPublishBatch(b *testing.B) {
	const batch = 500
	rdb := newRedis(b)
	stream := streamName(b, rdb, "bench-pub")
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream))
	es := make([]*outbox.Envelope, batch)
	for i := range es {
		es[i] = &outbox.Envelope{
			ID: fmt.Sprintf("ev-%06d", i), Type: "order.created", AggregateType: "order", AggregateID: fmt.Sprint(i),
			Attempt: 1, Payload: []byte(fmt.Sprintf(`{"i": %d}`, i)), CreatedAt: time.Now(),
		}
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		for _, err := range pub.PublishBatch(ctx, es) {
			must(b, err)
		}
		if i%100 == 99 { // keep the shared server's memory in check
			b.StopTimer()
			must(b, rdb.Del(ctx, stream).Err())
			b.StartTimer()
		}
	}
	b.ReportMetric(float64(batch*b.N)/b.Elapsed().Seconds(), "events/s")
}
