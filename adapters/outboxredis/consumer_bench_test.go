package outboxredis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
)

// BenchmarkConsumer measures one consumer handling a backlog with a no-op
// handler: events/s of the read, handle, acknowledge cycle.
func BenchmarkConsumer(b *testing.B) {
	benchConsumer(b, nil, nil)
}

// BenchmarkConsumerKeyOrder is BenchmarkConsumer for keyed entries over
// 8 keys, published WithKeyChain and consumed WithKeyOrder.
func BenchmarkConsumerKeyOrder(b *testing.B) {
	benchConsumer(b, []outboxredis.Option{outboxredis.WithKeyChain()}, []consume.Option{outboxredis.WithKeyOrder()})
}

// BenchmarkConsumerKeyOrderTwoConsumers is BenchmarkConsumerKeyOrder with
// two consumers of the group: a key's entries alternate between them, so
// that most wait for a predecessor the other one holds.
func BenchmarkConsumerKeyOrderTwoConsumers(b *testing.B) {
	benchConsumer(b, []outboxredis.Option{outboxredis.WithKeyChain()}, []consume.Option{outboxredis.WithKeyOrder(),
		consume.WithRetryDelay(100 * time.Millisecond), outboxredis.WithMinIdle(5 * time.Second)}, "c1")
}

func benchConsumer(b *testing.B, pubOpts []outboxredis.Option, conOpts []consume.Option, more ...string) {
	const n = 5000
	rdb := newRedis(b)
	for range b.N {
		stream := streamName(b, rdb, "bench-con")
		pub := outboxredis.NewStreamPublisher(rdb, append(pubOpts, outboxredis.WithDefaultStream(stream))...)
		for start := 0; start < n; start += 500 {
			batch := make([]*outbox.Envelope, 0, 500)
			for i := start; i < start+500; i++ {
				e := envelope(fmt.Sprintf("ev-%d", i), "t")
				e.PartitionKey = fmt.Sprintf("k%d", i%8)
				batch = append(batch, e)
			}
			for _, err := range pub.PublishBatch(context.Background(), batch) {
				must(b, err)
			}
		}
		var handled atomic.Int64
		h := consume.HandlerFunc(func(context.Context, *outbox.Envelope) error { handled.Add(1); return nil })
		start := time.Now()
		var stops []func()
		for _, name := range append([]string{"c"}, more...) {
			c := newConsumer(b, rdb, stream, "g", name, h, append(conOpts,
				consume.WithLogger(testLogger(b)), outboxredis.WithCount(100), outboxredis.WithBlock(10*time.Millisecond))...)
			stops = append(stops, run(b, c))
		}
		eventually(b, 5*time.Minute, "the backlog handled", func() bool { return handled.Load() >= n })
		elapsed := time.Since(start)
		for _, stop := range stops {
			stop()
		}
		b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	}
}
