package outboxredis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
)

// failFirst fails the first delivery of every entry at once, so that each
// is handled from its consumer's pending list (retried), and hands the
// later ones to h.
type failFirst struct{ h *overlaps }

func (f failFirst) Handle(ctx context.Context, e *outbox.Envelope) error {
	if entryOf(ctx).Deliveries == 1 {
		return errors.New("first delivery fails")
	}
	return f.h.Handle(ctx, e)
}

// Entries taken from a consumer's own pending list (retries of failed
// entries, and entries adopted from a consumer that died) are handled one
// at a time like a read batch, and, like it, none is handled by two
// consumers at once however long the list takes: min idle 2s, two
// consumers, ten entries of 600ms each waiting behind each other.
// Entries listed to be retried, or adopted, used to wait unkept: the other
// consumer adopted them once idle for the min idle time, and the first,
// going on down its list, claimed them back (XCLAIM takes an entry from
// whoever holds it) while the other ran them.
func TestConsumersNeverHandleARetriedEntryTwiceAtOnce(t *testing.T) {
	for _, c := range []struct {
		name   string
		keyed  bool
		adopt  bool // the entries are first read by a consumer that dies
		handle func(h *overlaps) consume.Handler
	}{
		{name: "retried", handle: func(h *overlaps) consume.Handler { return failFirst{h} }},
		{name: "retried/keyed", keyed: true, handle: func(h *overlaps) consume.Handler { return failFirst{h} }},
		{name: "adopted", adopt: true, handle: func(h *overlaps) consume.Handler { return h }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const entries = 10
			rdb := newRedis(t)
			stream := streamName(t, rdb, "overlap-retry")
			popts := []outboxredis.Option{outboxredis.WithDefaultStream(stream)}
			copts := []consume.Option{outboxredis.WithCount(entries), outboxredis.WithMinIdle(2 * time.Second),
				consume.WithMaxDeliveries(5)}
			if c.keyed {
				popts = append(popts, outboxredis.WithKeyChain())
				copts = append(copts, outboxredis.WithKeyOrder())
			}
			pub := outboxredis.NewStreamPublisher(rdb, popts...)
			for i := range entries {
				e := envelope(fmt.Sprintf("ev-%03d", i), "t")
				if c.keyed {
					e.PartitionKey = "k"
				}
				must(t, pub.Publish(t.Context(), e))
			}
			if c.adopt {
				must(t, rdb.XGroupCreateMkStream(t.Context(), stream, "g", "0").Err())
				got, err := rdb.XReadGroup(t.Context(), &redis.XReadGroupArgs{Group: "g", Consumer: "gone", Streams: []string{stream, ">"}, Count: entries}).Result()
				must(t, err)
				if len(got) != 1 || len(got[0].Messages) != entries {
					t.Fatalf("the consumer that dies read %v, want the %d entries", got, entries)
				}
			}
			h := newOverlaps(600 * time.Millisecond)
			for i := range 2 {
				run(t, newConsumer(t, rdb, stream, "g", fmt.Sprintf("c%d", i), c.handle(h), consumerOpts(t, copts...)...))
			}
			eventually(t, 60*time.Second, "every entry handled and acknowledged", func() bool {
				return h.handled() == entries && settled(t, rdb, stream, "g")
			})
			time.Sleep(2500 * time.Millisecond) // past the min idle time: an entry adopted late would run again
			h.check(t, entries)
		})
	}
}
