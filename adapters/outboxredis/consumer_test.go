package outboxredis_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
)

// publish appends the envelopes to stream.
func publish(t testing.TB, rdb *redis.Client, stream string, es ...*outbox.Envelope) {
	t.Helper()
	for i, err := range outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream)).PublishBatch(context.Background(), es) {
		if err != nil {
			t.Fatalf("publishing event %d: %v", i, err)
		}
	}
}

// calls records handler calls per event id.
type calls struct {
	mu         sync.Mutex
	byID       map[string]int
	deliveries map[string][]int64
}

func newCalls() *calls { return &calls{byID: map[string]int{}, deliveries: map[string][]int64{}} }

func (c *calls) add(ctx context.Context, e *outbox.Envelope) {
	d := entryOf(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byID[e.ID]++
	c.deliveries[e.ID] = append(c.deliveries[e.ID], d.Deliveries)
}

func (c *calls) of(id string) (int, []int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byID[id], append([]int64(nil), c.deliveries[id]...)
}

func (c *calls) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.byID)
}

func TestConsumerHandlesEveryEventAndAcks(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "con-basic")
	// Published before the group exists: the default start id "0" reads them.
	var es []*outbox.Envelope
	for i := range 25 {
		es = append(es, envelope(fmt.Sprintf("ev-%d", i), "order.created"))
	}
	publish(t, rdb, stream, es...)

	seen := newCalls()
	var wrong atomic.Value
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		d, ok := consume.DeliveryFrom(ctx)
		en := entryOf(ctx)
		if !ok || d.System != "redis" || d.Destination != stream || d.Attempt != 1 ||
			en.Stream != stream || en.Group != "g" || en.Consumer != "c1" || en.EntryID == "" || en.Deliveries != 1 {
			wrong.Store(fmt.Sprintf("delivery %+v, %v", d, ok))
		}
		seen.add(ctx, e)
		return nil
	})
	c := newConsumer(t, rdb, stream, "g", "c1", h, consumerOpts(t, outboxredis.WithCount(4))...)
	stop := run(t, c)
	eventually(t, 10*time.Second, "every event handled", func() bool { return seen.distinct() == 25 })
	publish(t, rdb, stream, envelope("late", "order.created")) // read while running
	eventually(t, 10*time.Second, "the late event", func() bool { n, _ := seen.of("late"); return n == 1 })
	eventually(t, 5*time.Second, "all acknowledged", func() bool { return pendingCount(t, rdb, stream, "g") == 0 })
	stop()
	for _, e := range append(es, envelope("late", "")) {
		if n, _ := seen.of(e.ID); n != 1 {
			t.Errorf("event %s handled %d times", e.ID, n)
		}
	}
	if w := wrong.Load(); w != nil {
		t.Error(w)
	}
}

func TestStartIDDollarSkipsExistingEntries(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "con-start")
	publish(t, rdb, stream, envelope("old", "t"))
	seen := newCalls()
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error { seen.add(ctx, e); return nil })
	stop := run(t, newConsumer(t, rdb, stream, "g", "c", h, consumerOpts(t, outboxredis.WithStartID("$"))...))
	eventually(t, 5*time.Second, "the group", func() bool {
		groups, err := rdb.XInfoGroups(t.Context(), stream).Result()
		return err == nil && len(groups) == 1
	})
	publish(t, rdb, stream, envelope("new", "t"))
	eventually(t, 5*time.Second, "the new event", func() bool { n, _ := seen.of("new"); return n == 1 })
	stop()
	if n, _ := seen.of("old"); n != 0 {
		t.Errorf("the entry older than the group was handled %d times", n)
	}
}

func TestFailedHandlerLeavesThePendingMessageForARetry(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "con-retry")
	seen := newCalls()
	var pendingAtRetry atomic.Int64
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		seen.add(ctx, e)
		d := entryOf(ctx)
		if d.Deliveries == 2 {
			// The first failure was not acknowledged: the message is still
			// pending, delivered twice.
			p, err := rdb.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: "-", End: "+", Count: 10}).Result()
			if err == nil && len(p) == 1 && p[0].ID == d.EntryID {
				pendingAtRetry.Store(p[0].RetryCount)
			}
		}
		if d.Deliveries < 3 {
			return errors.New("downstream hiccup")
		}
		return nil
	})
	var dead atomic.Int32
	c := newConsumer(t, rdb, stream, "g", "c", h, consumerOpts(t,
		consume.WithOnDead(func(context.Context, consume.DeadLetter) { dead.Add(1) }))...)
	stop := run(t, c)
	publish(t, rdb, stream, envelope("flaky", "t"))
	eventually(t, 10*time.Second, "success on the third delivery", func() bool { n, _ := seen.of("flaky"); return n >= 3 })
	eventually(t, 5*time.Second, "the acknowledgement", func() bool { return pendingCount(t, rdb, stream, "g") == 0 })
	stop()
	n, ds := seen.of("flaky")
	if n != 3 || fmt.Sprint(ds) != "[1 2 3]" {
		t.Errorf("handled %d times with delivery counts %v, want 3 times [1 2 3]", n, ds)
	}
	if got := pendingAtRetry.Load(); got != 2 {
		t.Errorf("at the retry the message was pending with delivery count %d, want 2", got)
	}
	if dead.Load() != 0 {
		t.Errorf("%d dead messages, want none", dead.Load())
	}
}

func TestPermanentMalformedAndExhaustedMessagesAreDead(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "con-dead", ":dlq")
	dlq := stream + ":dlq"
	seen := newCalls()
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		seen.add(ctx, e)
		switch e.Type {
		case "bad.payload":
			return outbox.Permanent(errors.New("cannot parse the payload"))
		case "always.fails":
			return errors.New("still down")
		}
		return nil
	})
	var (
		mu   sync.Mutex
		dead = map[string]consume.DeadLetter{}
	)
	c := newConsumer(t, rdb, stream, "g", "c", h, consumerOpts(t,
		consume.WithMaxDeliveries(3),
		outboxredis.WithDeadLetterStream(dlq),
		consume.WithOnDead(func(_ context.Context, d consume.DeadLetter) {
			mu.Lock()
			defer mu.Unlock()
			dead[d.Delivery.Details.(outboxredis.Entry).EntryID] = d
		}))...)
	publish(t, rdb, stream, envelope("perm", "bad.payload"), envelope("ok", "fine"), envelope("exhausted", "always.fails"))
	noEvent := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, Values: []any{"foo", "bar"}}).Val()
	badJSON := rdb.XAdd(t.Context(), &redis.XAddArgs{Stream: stream, Values: []any{outboxredis.FieldEvent, "{not json"}}).Val()
	stop := run(t, c)
	eventually(t, 10*time.Second, "four dead messages", func() bool { mu.Lock(); defer mu.Unlock(); return len(dead) == 4 })
	eventually(t, 5*time.Second, "all acknowledged", func() bool { return pendingCount(t, rdb, stream, "g") == 0 })
	stop()

	mu.Lock()
	defer mu.Unlock()
	byEvent := map[string]consume.DeadLetter{}
	for _, d := range dead {
		if d.Envelope != nil {
			byEvent[d.Envelope.ID] = d
		}
	}
	if d := byEvent["perm"]; !outbox.IsPermanent(d.Reason) || d.Delivery.Details.(outboxredis.Entry).Deliveries != 1 {
		t.Errorf("permanent failure: %+v", d)
	}
	if n, _ := seen.of("perm"); n != 1 {
		t.Errorf("permanent failure handled %d times, want 1", n)
	}
	if d := byEvent["exhausted"]; !errors.Is(d.Reason, consume.ErrTooManyDeliveries) {
		t.Errorf("exhausted message: %+v", d)
	}
	if n, _ := seen.of("exhausted"); n != 3 {
		t.Errorf("always-failing handler ran %d times, want 3 (WithMaxDeliveries)", n)
	}
	if _, ok := byEvent["ok"]; ok {
		t.Error("a handled event went dead")
	}
	if d := dead[noEvent]; !errors.Is(d.Reason, consume.ErrMalformed) || d.Envelope != nil {
		t.Errorf("entry without an event field: %+v", d)
	}
	if d := dead[badJSON]; !errors.Is(d.Reason, consume.ErrMalformed) || !errors.Is(d.Reason, outbox.ErrInvalidEnvelope) {
		t.Errorf("entry with bad JSON: %+v", d)
	}

	letters, err := rdb.XRange(t.Context(), dlq, "-", "+").Result()
	must(t, err)
	if len(letters) != 4 {
		t.Fatalf("dead-letter stream holds %d entries, want 4", len(letters))
	}
	for _, l := range letters {
		id, _ := l.Values[outboxredis.FieldDeadEntryID].(string)
		if _, ok := dead[id]; !ok || l.Values[outboxredis.FieldDeadStream] != stream || l.Values[outboxredis.FieldDeadReason] == "" {
			t.Errorf("dead letter %v", l.Values)
		}
	}
}

func TestConsumerRecreatesADeletedGroup(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "con-nogroup")
	seen := newCalls()
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error { seen.add(ctx, e); return nil })
	stop := run(t, newConsumer(t, rdb, stream, "g", "c", h, consumerOpts(t)...))
	publish(t, rdb, stream, envelope("one", "t"))
	eventually(t, 5*time.Second, "the first event", func() bool { n, _ := seen.of("one"); return n == 1 })
	must(t, rdb.Del(t.Context(), stream).Err())
	publish(t, rdb, stream, envelope("two", "t"))
	eventually(t, 10*time.Second, "the event after the group was deleted", func() bool { n, _ := seen.of("two"); return n == 1 })
	stop()
}

func TestNewConsumerRefusesBadArguments(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer rdb.Close()
	h := consume.HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil })
	type args struct {
		rdb                     redis.UniversalClient
		stream, group, consumer string
		h                       consume.Handler
		opts                    []consume.Option
	}
	ok := args{rdb, "s", "g", "c", h, nil}
	with := func(opts ...consume.Option) args { a := ok; a.opts = opts; return a }
	cases := map[string]args{
		"nil client":     {nil, "s", "g", "c", h, nil},
		"empty stream":   {rdb, "", "g", "c", h, nil},
		"empty group":    {rdb, "s", "", "c", h, nil},
		"empty consumer": {rdb, "s", "g", "", h, nil},
		"nil handler":    {rdb, "s", "g", "c", nil, nil},
		"start id":       with(outboxredis.WithStartID(">")),
		"block":          with(outboxredis.WithBlock(0)),
		"count":          with(outboxredis.WithCount(0)),
		"min idle":       with(outboxredis.WithMinIdle(0)),
		"claim interval": with(outboxredis.WithClaimInterval(-time.Second)),
		"dead stream":    with(outboxredis.WithDeadLetterStream("")),
		"shared option":  with(consume.WithMaxDeliveries(0)),
		"idem store":     {rdb, "s", "g", "c", consume.Idempotent(nil, "n", h), nil},
	}
	for name, a := range cases {
		c, err := outboxredis.NewConsumer(a.rdb, a.stream, a.group, a.consumer, a.h, a.opts...)
		if !errors.Is(err, consume.ErrInvalidOption) || c != nil {
			t.Errorf("%s: NewConsumer = %v, %v; want no consumer and ErrInvalidOption", name, c, err)
		}
	}
	if _, err := outboxredis.NewConsumer(rdb, "s", "g", "c", h, outboxredis.WithStartID("$"), outboxredis.WithStartID("1700000000000-0")); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

// Deliveries that end "in progress elsewhere" (or "unavailable") do not
// count towards WithMaxDeliveries: the message is handled, not dead.
func TestSoftFailuresDoNotExhaustDeliveries(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "con-soft")
	var tries atomic.Int32
	var deadCount atomic.Int32
	h := consume.HandlerFunc(func(context.Context, *outbox.Envelope) error {
		if tries.Add(1) <= 4 {
			return fmt.Errorf("another consumer holds it: %w", idempotency.ErrInProgress)
		}
		return nil
	})
	c := newConsumer(t, rdb, stream, "g", "c", h, consumerOpts(t,
		consume.WithMaxDeliveries(2),
		consume.WithOnDead(func(context.Context, consume.DeadLetter) { deadCount.Add(1) }))...)
	publish(t, rdb, stream, envelope("soft", "t"))
	stop := run(t, c)
	eventually(t, 20*time.Second, "the message handled", func() bool { return tries.Load() >= 5 && pendingCount(t, rdb, stream, "g") == 0 })
	stop()
	if deadCount.Load() != 0 {
		t.Errorf("the message went dead after %d soft failures", tries.Load()-1)
	}
}

// Entries that keep failing, always a batch of them due again, do not
// hold up the stream: new entries are read between retries.
func TestRetriesDoNotHoldUpNewEntries(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "con-fair")
	var bad []*outbox.Envelope
	for i := range 20 {
		bad = append(bad, envelope(fmt.Sprintf("bad-%d", i), "always.fails"))
	}
	publish(t, rdb, stream, bad...)
	seen := newCalls()
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		seen.add(ctx, e)
		if e.Type == "always.fails" {
			time.Sleep(10 * time.Millisecond) // a batch takes the retry delay: some are always due
			return errors.New("still failing")
		}
		return nil
	})
	run(t, newConsumer(t, rdb, stream, "g", "c", h, consumerOpts(t, outboxredis.WithCount(5), consume.WithMaxDeliveries(100000))...))
	eventually(t, 10*time.Second, "failing entries retried", func() bool { n, _ := seen.of(bad[0].ID); return n >= 3 })
	publish(t, rdb, stream, envelope("new", "t"))
	eventually(t, 10*time.Second, "the new entry handled while the others are retried", func() bool { n, _ := seen.of("new"); return n == 1 })
}
