package outboxnats_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

const (
	benchEvents = 50_000
	benchBatch  = 500
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

// BenchmarkRelayToJetStream relays 50,000 events from PostgreSQL into a
// JetStream stream through the Publisher (PublishBatch: batches of 500
// published asynchronously, then their acknowledgements awaited) and
// compares the rate with the same asynchronous publishes (same subjects,
// headers and CloudEvents bodies, encoded beforehand) made directly from
// a loop in batches of the same size: relay-events/s, raw-events/s and
// relay/raw. It also drains the same backlog through a publisher that does
// nothing (relay-noop-events/s), the ceiling set by the relay's database
// work.
//
//	go test -run '^$' -bench . -benchtime 1x ./...   (in adapters/outboxnats)
func BenchmarkRelayToJetStream(b *testing.B) {
	js := newJS(b)
	var relayTime, noopTime, rawTime time.Duration
	for range b.N {
		stream := newStream(b, js)
		relayTime += drainRelay(b, benchEvents, benchBatch, newPublisher(b, js, outboxnats.WithSubjectPrefix(stream+".")))
		if n := streamMsgs(b, js, stream); n != benchEvents {
			b.Fatalf("stream holds %d messages, want %d", n, benchEvents)
		}
		noopTime += drainRelay(b, benchEvents, benchBatch, noopPublisher{})
		rawTime += rawPublishes(b, js, benchEvents, benchBatch)
	}
	relayRate := float64(benchEvents*b.N) / relayTime.Seconds()
	rawRate := float64(benchEvents*b.N) / rawTime.Seconds()
	b.ReportMetric(relayRate, "relay-events/s")
	b.ReportMetric(rawRate, "raw-events/s")
	b.ReportMetric(relayRate/rawRate, "relay/raw")
	b.ReportMetric(float64(benchEvents*b.N)/noopTime.Seconds(), "relay-noop-events/s")
}

// drainRelay writes events to a fresh PostgreSQL database and returns how
// long one relay takes to deliver them all through pub (the benchmark's
// timer runs only meanwhile).
func drainRelay(b *testing.B, events, batch int, pub relay.BatchPublisher) time.Duration {
	b.Helper()
	b.StopTimer()
	db, _ := setupDB(b, testenv.Open(b, testenv.Postgres))
	testenv.Emit(b, db, events, func(i int) outbox.Event {
		return outbox.Event{Type: "order.created", Topic: "orders", AggregateType: "order", AggregateID: fmt.Sprint(i),
			Payload: map[string]int{"i": i}}
	})
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

// rawPublishes publishes n messages like the Publisher's (subject,
// headers and body built beforehand) to a fresh stream, asynchronously in
// batches of batch whose acknowledgements it awaits before the next, and
// returns the time taken.
func rawPublishes(b *testing.B, js jetstream.JetStream, n, batch int) time.Duration {
	b.Helper()
	stream := newStream(b, js)
	msgs := make([]*nats.Msg, n)
	for i := range msgs {
		e := &outbox.Envelope{
			ID: fmt.Sprintf("ev-%06d", i), Type: "order.created", Topic: "orders", Source: outbox.DefaultSource,
			AggregateType: "order", AggregateID: fmt.Sprint(i), Attempt: 1,
			Payload: fmt.Appendf(nil, `{"i":%d}`, i), CreatedAt: time.Now(),
		}
		body, err := e.MarshalJSON()
		must(b, err)
		m := nats.NewMsg(stream + ".orders")
		m.Data = body
		m.Header.Set(jetstream.MsgIDHeader, e.ID)
		m.Header.Set(outboxnats.HeaderContentType, outboxnats.ContentType)
		m.Header.Set(outboxnats.HeaderEventType, e.Type)
		msgs[i] = m
	}
	start := time.Now()
	futures := make([]jetstream.PubAckFuture, 0, batch)
	for off := 0; off < n; off += batch {
		futures = futures[:0]
		for _, m := range msgs[off:min(n, off+batch)] {
			f, err := js.PublishMsgAsync(m, jetstream.WithStallWait(outboxnats.DefaultAckTimeout))
			must(b, err)
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			case <-time.After(outboxnats.DefaultAckTimeout):
				b.Fatal("no acknowledgement")
			}
		}
	}
	d := time.Since(start)
	if got := streamMsgs(b, js, stream); got != uint64(n) {
		b.Fatalf("raw stream holds %d messages, want %d", got, n)
	}
	return d
}

// BenchmarkPublishBatch measures the Publisher alone, without the relay's
// database work: PublishBatch of 500 envelopes (JSON encoding included),
// as events per second.
func BenchmarkPublishBatch(b *testing.B) {
	js := newJS(b)
	stream := newStream(b, js, func(c *jetstream.StreamConfig) { c.Storage = jetstream.MemoryStorage; c.MaxMsgs = 100_000 })
	pub := newPublisher(b, js, outboxnats.WithSubjectPrefix(stream+"."))
	es := make([]*outbox.Envelope, benchBatch)
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		for j := range es { // fresh ids: duplicates would be dropped
			es[j] = &outbox.Envelope{
				ID: fmt.Sprintf("ev-%d-%d", i, j), Type: "order.created", Topic: "orders", AggregateType: "order",
				AggregateID: fmt.Sprint(j), Attempt: 1, Payload: fmt.Appendf(nil, `{"i":%d}`, j), CreatedAt: time.Now(),
			}
		}
		b.StartTimer()
		for _, err := range pub.PublishBatch(ctx, es) {
			must(b, err)
		}
	}
	b.ReportMetric(float64(benchBatch*b.N)/b.Elapsed().Seconds(), "events/s")
}
