package outboxredis_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/consume/consumetest"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// The consumer kit's conformance suite against the real Redis: publishers
// WithKeyChain and consumers WithKeyOrder (so a key's order holds across
// consumers), the dead-letter stream "<stream>:dead", and every client
// made through a proxy that Outage cuts.
func TestConformance(t *testing.T) {
	direct := newRedis(t)
	proxy := testenv.NewProxy(t, testenv.RedisAddr(t))
	client := func(t testing.TB) *redis.Client { return newRedisAt(t, proxy.Addr()) }
	consumetest.Exercise(t, consumetest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			return outboxredis.NewStreamPublisher(client(t), outboxredis.WithKeyChain(), outboxredis.WithLogger(testLogger(t)))
		},
		NewDest: func(t testing.TB) string { return streamName(t, direct, "conformance") },
		NewConsumer: func(t testing.TB, dest, name string, h consume.Handler, opts ...consume.Option) *consume.Consumer {
			return newConsumer(t, client(t), dest, "g", name, h, append(opts, outboxredis.WithDeadLetterStream(dest+":dead"))...)
		},
		DeadLetters: func(t testing.TB, dest string) []string { return deadEventIDs(t, direct, dest+":dead") },
		Outage: func(testing.TB) func() {
			proxy.Cut()
			return proxy.Restore
		},
		KeyOrderAcrossConsumers: true,
		Options: []consume.Option{outboxredis.WithKeyOrder(), outboxredis.WithBlock(50 * time.Millisecond),
			outboxredis.WithMinIdle(5 * time.Second), outboxredis.WithClaimInterval(20 * time.Millisecond)},
	})
}

// deadEventIDs reads every page of a dead-letter stream, and returns the
// ids of the events in it.
func deadEventIDs(t testing.TB, rdb redis.UniversalClient, deadStream string) []string {
	t.Helper()
	dl := outboxredis.NewDeadLetters(rdb, deadStream)
	var ids []string
	for cursor := ""; ; {
		page, next, err := dl.DeadLetters(t.Context(), cursor, 2)
		must(t, err)
		for _, m := range page {
			if m.Envelope != nil {
				ids = append(ids, m.Envelope.ID)
			}
		}
		if next == "" {
			return ids
		}
		cursor = next
	}
}
