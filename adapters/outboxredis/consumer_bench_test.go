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

func benchConsumer(b *testing.B, pubOpts []outboxredis.Option, conOpts []consume.Option) {
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
		c := newConsumer(b, rdb, stream, "g", "c", h, append(conOpts,
			consume.WithLogger(testLogger(b)), outboxredis.WithCount(100), outboxredis.WithBlock(10*time.Millisecond))...)
		start := time.Now()
		stop := run(b, c)
		eventually(b, 5*time.Minute, "the backlog handled", func() bool { return handled.Load() >= n })
		elapsed := time.Since(start)
		stop()
		b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
	}
}
