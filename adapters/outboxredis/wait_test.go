package outboxredis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
)

// WithWaitReplicas refuses what it cannot do, naming it.
func TestWaitReplicasOptions(t *testing.T) {
	rdb := newRedis(t)
	for _, c := range []struct {
		opt  outboxredis.Option
		want string
	}{
		{outboxredis.WithWaitReplicas(0, time.Second), "at least 1 replica"},
		{outboxredis.WithWaitReplicas(1, 0), "timeout up to 10s"},
		{outboxredis.WithWaitReplicas(1, 11*time.Second), "timeout up to 10s"},
	} {
		err := outboxredis.NewStreamPublisher(rdb, c.opt).Validate()
		if !errors.Is(err, outboxredis.ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate: %v; want ErrInvalidOption saying %q", err, c.want)
		}
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": rdb.Options().Addr}})
	t.Cleanup(func() { _ = ring.Close() })
	if err := outboxredis.NewStreamPublisher(ring, outboxredis.WithWaitReplicas(1, time.Second)).Validate(); !errors.Is(err, outboxredis.ErrInvalidOption) ||
		!strings.Contains(err.Error(), "*redis.Ring") {
		t.Errorf("Validate with a ring: %v; want ErrInvalidOption naming the client", err)
	}
}

// A Redis without the replicas WithWaitReplicas asks for does not get an
// event reported published: the entry is appended, but the result is
// outbox.Unavailable wrapping ErrNotReplicated (the relay appends it again
// later without spending an attempt). Its control, the same publisher
// without the option, reports it published.
func TestWaitReplicasWithoutReplicas(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "wait")
	waiting := outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream), outboxredis.WithWaitReplicas(1, 100*time.Millisecond))
	must(t, waiting.Validate())
	for _, err := range append(waiting.PublishBatch(t.Context(), []*outbox.Envelope{envelope("ev-1", "t"), envelope("ev-2", "t")}),
		waiting.Publish(t.Context(), envelope("ev-3", "t"))) {
		if !outbox.IsUnavailable(err) || !errors.Is(err, outboxredis.ErrNotReplicated) {
			t.Errorf("publish without replicas: %v; want Unavailable wrapping ErrNotReplicated", err)
		}
	}
	plain := outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream))
	if err := plain.Publish(t.Context(), envelope("ev-4", "t")); err != nil {
		t.Errorf("the control without WithWaitReplicas: %v", err)
	}
	if n := rdb.XLen(t.Context(), stream).Val(); n != 4 {
		t.Errorf("%d entries in the stream, want 4 (every append made)", n)
	}
}
