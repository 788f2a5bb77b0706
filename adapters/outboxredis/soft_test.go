package outboxredis_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
)

// outageHandler fails with outbox.Unavailable (its own dependency is down)
// for its first `failures` runs, then handles every event.
type outageHandler struct {
	failures int32
	runs     atomic.Int32
	seen     *calls
	attempts sync.Map // event id → Delivery.Attempt of its successful run
}

func (h *outageHandler) Handle(ctx context.Context, e *outbox.Envelope) error {
	if h.runs.Add(1) <= h.failures {
		return outbox.Unavailable(errors.New("the handler's database is down"))
	}
	h.seen.add(ctx, e)
	d, _ := consume.DeliveryFrom(ctx)
	h.attempts.Store(e.ID, d.Attempt)
	return nil
}

// checkAttempts checks that each successful run was the entry's first
// counted attempt.
func (h *outageHandler) checkAttempts(t *testing.T, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if a, _ := h.attempts.Load(id); a != 1 {
			t.Errorf("entry %s handled as attempt %v, want 1: runs that did not count were counted", id, a)
		}
	}
}

// deadRecorder collects the consumer's dead messages.
type deadRecorder struct {
	mu   sync.Mutex
	msgs []consume.DeadLetter
}

func (d *deadRecorder) option() consume.Option {
	return consume.WithOnDead(func(_ context.Context, m consume.DeadLetter) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.msgs = append(d.msgs, m)
	})
}

func (d *deadRecorder) reasons() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, m := range d.msgs {
		out = append(out, m.Delivery.Details.(outboxredis.Entry).EntryID+": "+m.Reason.Error())
	}
	return out
}

// Issue 8, scenario 1, across a restart: entries A, B and C are pending;
// the handler's own dependency is down for longer than max deliveries ×
// retry delay, and the consumer is restarted under the same name in the
// middle of it: what did not count before the restart (runs that ended
// unavailable, deliveries that never reached the handler, recorded in
// ExcusedKey) does not count after it. Every entry is handled once the
// dependency is back, none dead. (consumetest's DependencyDown is the same
// without the restart.)
func TestHandlerOutageAcrossARestartKillsNoMessage(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "soft-restart")
	publish(t, rdb, stream, envelope("A", "t"), envelope("B", "t"), envelope("C", "t"))
	h := &outageHandler{failures: 4, seen: newCalls()}
	var dead deadRecorder
	opts := consumerOpts(t, consume.WithMaxDeliveries(2), dead.option())
	stop := run(t, newConsumer(t, rdb, stream, "g", "c", h, opts...))
	eventually(t, 30*time.Second, "three unavailable runs", func() bool { return h.runs.Load() >= 3 })
	stop()
	if got := dead.reasons(); len(got) != 0 {
		t.Fatalf("dead before the restart: %v", got)
	}
	stop = run(t, newConsumer(t, rdb, stream, "g", "c", h, opts...))
	eventually(t, 30*time.Second, "every entry settled", func() bool { return h.seen.distinct()+len(dead.reasons()) >= 3 && settled(t, rdb, stream, "g") })
	stop()
	checkHandledOnce(t, h.seen, &dead, "A", "B", "C")
	h.checkAttempts(t, "A", "B", "C")
}

// settled reports whether the group exists and has nothing pending.
func settled(t testing.TB, rdb *redis.Client, stream, group string) bool {
	t.Helper()
	p, err := rdb.XPending(context.Background(), stream, group).Result()
	return err == nil && p.Count == 0
}

func checkHandledOnce(t *testing.T, seen *calls, dead *deadRecorder, ids ...string) {
	t.Helper()
	if got := dead.reasons(); len(got) != 0 {
		t.Errorf("dead messages: %v", got)
	}
	for _, id := range ids {
		if n, ds := seen.of(id); n != 1 {
			t.Errorf("entry %s handled %d times (delivery counts %v), want once", id, n, ds)
		}
	}
}
