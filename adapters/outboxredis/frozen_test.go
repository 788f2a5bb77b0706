package outboxredis_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// logWatch is a slog.Handler that closes a channel once a record whose
// message or an attribute (such as the error of a message that could not
// be settled) contains want is logged.
type logWatch struct {
	want string
	seen chan struct{}
	once *sync.Once
}

func newLogWatch(want string) logWatch {
	return logWatch{want: want, seen: make(chan struct{}), once: &sync.Once{}}
}

func (w logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w logWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w logWatch) WithGroup(string) slog.Handler            { return w }
func (w logWatch) Handle(_ context.Context, r slog.Record) error {
	found := strings.Contains(r.Message, w.want)
	r.Attrs(func(a slog.Attr) bool {
		found = found || strings.Contains(a.Value.String(), w.want)
		return !found
	})
	if found {
		w.once.Do(func() { close(w.seen) })
	}
	return nil
}

// handlerRuns records, per consumer, the entries its handler ran.
type handlerRuns struct {
	mu   sync.Mutex
	runs map[string][]string
}

func (h *handlerRuns) add(consumer, id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs[consumer] = append(h.runs[consumer], id)
}

func (h *handlerRuns) of(consumer string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.runs[consumer])
}

// A consumer frozen while it holds a keyed batch (its Redis connection
// holds every byte: its keeper cannot reset the entries' idle time) loses
// them to the other consumer after the min idle time. When it resumes, it
// does not acknowledge the entry its handler ran, which the other consumer
// now owns and runs (key order waits for that run), and it leaves the
// rest of its batch to that consumer: each of those runs once, in key
// order, on the consumer that adopted them.
func TestFrozenConsumerLeavesAdoptedEntries(t *testing.T) {
	t.Parallel()
	rdb := newRedis(t)
	stream := streamName(t, rdb, "frozen")
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream), outboxredis.WithKeyChain())
	ids := []string{"ev-000", "ev-001", "ev-002"}
	for _, id := range ids {
		e := envelope(id, "t")
		e.PartitionKey = "k"
		must(t, pub.Publish(t.Context(), e))
	}
	copts := []consume.Option{outboxredis.WithKeyOrder(), outboxredis.WithMinIdle(2 * time.Second)}
	proxy := testenv.NewProxy(t, testenv.RedisAddr(t))
	watch := newLogWatch("was adopted by another consumer while its handler ran here")
	runs := &handlerRuns{runs: map[string][]string{}}
	frozen, adopted := make(chan struct{}), make(chan struct{})
	var frozenOnce, adoptedOnce sync.Once

	// a: reads the three entries; its first run freezes it until b runs
	// that entry.
	a := consume.HandlerFunc(func(_ context.Context, e *outbox.Envelope) error {
		runs.add("a", e.ID)
		if e.ID == ids[0] {
			proxy.Stall()
			frozenOnce.Do(func() { close(frozen) })
			select {
			case <-adopted:
			case <-time.After(30 * time.Second):
				t.Error("the other consumer did not adopt the frozen consumer's entry within 30s")
			}
			proxy.Resume()
		}
		return nil
	})
	// b: adopts them; while it runs the first, the thawed a must not
	// acknowledge it.
	b := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		runs.add("b", e.ID)
		if e.ID != ids[0] {
			return nil
		}
		adoptedOnce.Do(func() { close(adopted) })
		select {
		case <-watch.seen:
		case <-time.After(20 * time.Second):
			t.Error("the thawed consumer did not report, within 20s, the entry it ran as adopted by the other")
		}
		d := entryOf(ctx)
		p, err := rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: d.EntryID, End: d.EntryID, Count: 1}).Result()
		if err != nil || len(p) != 1 || p[0].Consumer != "b" {
			t.Errorf("while b runs %s, its pending entry is %+v (err %v); want it pending, b's: the thawed consumer acknowledged it", e.ID, p, err)
		}
		return nil
	})
	run(t, newConsumer(t, newRedisAt(t, proxy.Addr()), stream, "g", "a", a,
		consumerOpts(t, append(copts, consume.WithLogger(slog.New(watch)))...)...))
	select {
	case <-frozen:
	case <-time.After(30 * time.Second):
		t.Fatal("consumer a did not run the first entry within 30s")
	}
	run(t, newConsumer(t, rdb, stream, "g", "b", b, consumerOpts(t, copts...)...))
	eventually(t, 60*time.Second, "every entry handled and acknowledged", func() bool {
		return len(runs.of("b")) >= len(ids) && settled(t, rdb, stream, "g")
	})
	time.Sleep(500 * time.Millisecond)
	if got := runs.of("a"); fmt.Sprint(got) != fmt.Sprint(ids[:1]) {
		t.Errorf("the frozen consumer ran %v, want only %v (the rest of its batch was adopted)", got, ids[:1])
	}
	if got := runs.of("b"); fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Errorf("the adopting consumer ran %v, want %v, each once, in key order", got, ids)
	}
}
