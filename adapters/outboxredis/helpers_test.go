package outboxredis_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger logs to the test output with OUTBOX_TEST_LOG=1, else nowhere.
func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// newRedis returns a client of the test Redis, closed when t ends.
func newRedis(t testing.TB) *redis.Client {
	t.Helper()
	return newRedisAt(t, testenv.RedisAddr(t))
}

func newRedisAt(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// streamName returns a unique stream name, deleted when t ends with every
// key whose name contains it (the names that derive from it by suffix, the
// consumers' and publishers' keys of the stream).
func streamName(t testing.TB, rdb *redis.Client, prefix string, suffixes ...string) string {
	t.Helper()
	name := testenv.Name(prefix)
	t.Cleanup(func() {
		ctx := context.Background()
		keys := []string{name}
		for _, s := range suffixes {
			keys = append(keys, name+s)
		}
		iter := rdb.Scan(ctx, 0, "*"+name+"*", 1000).Iterator()
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Errorf("scanning the keys of %s: %v", name, err)
		}
		if err := rdb.Del(ctx, keys...).Err(); err != nil {
			t.Errorf("deleting %v: %v", keys, err)
		}
	})
	return name
}

// consumerOpts are fast settings for tests: a retry delay of 50ms that
// does not grow.
func consumerOpts(t testing.TB, more ...consume.Option) []consume.Option {
	return append([]consume.Option{
		consume.WithLogger(testLogger(t)),
		outboxredis.WithBlock(50 * time.Millisecond),
		outboxredis.WithMinIdle(400 * time.Millisecond),
		consume.WithRetryDelay(50 * time.Millisecond),
		consume.WithMaxRetryDelay(50 * time.Millisecond),
		outboxredis.WithClaimInterval(25 * time.Millisecond),
	}, more...)
}

// newConsumer is outboxredis.NewConsumer, failing t on an error.
func newConsumer(t testing.TB, rdb redis.UniversalClient, stream, group, name string, h consume.Handler, opts ...consume.Option) *consume.Consumer {
	t.Helper()
	c, err := outboxredis.NewConsumer(rdb, stream, group, name, h, opts...)
	must(t, err)
	return c
}

// entryOf returns the stream entry of the handler's delivery.
func entryOf(ctx context.Context) outboxredis.Entry {
	d, _ := consume.DeliveryFrom(ctx)
	e, _ := d.Details.(outboxredis.Entry)
	return e
}

// run starts c.Run and returns a function that stops it and checks that
// Run returned nil. It is stopped when t ends at the latest.
func run(t testing.TB, c *consume.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v, want nil", err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("Run did not return within 10s of its context ending")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// eventually waits up to d for cond, checking every 10ms.
func eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// pendingCount is the number of messages of the group not acknowledged.
func pendingCount(t testing.TB, rdb *redis.Client, stream, group string) int64 {
	t.Helper()
	p, err := rdb.XPending(context.Background(), stream, group).Result()
	must(t, err)
	return p.Count
}

func envelope(id, typ string) *outbox.Envelope {
	return &outbox.Envelope{
		ID: id, Type: typ, Attempt: 1,
		Payload:   []byte(`{"id":"` + id + `"}`),
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC),
	}
}

// outboxDB opens a database of the dialect with the plugin, the outbox and
// an idempotency store.
func outboxDB(t testing.TB, dialect string) (*gorm.DB, *idempotency.Store) {
	t.Helper()
	db := testenv.Open(t, dialect)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	store, err := idempotency.NewStore(db)
	must(t, err)
	must(t, store.Migrate(context.Background()))
	return db, store
}

// newRelay builds a relay with test settings.
func newRelay(t testing.TB, db *gorm.DB, pub relay.Publisher, opts ...relay.Option) *relay.Relay {
	t.Helper()
	base := []relay.Option{relay.WithLogger(testLogger(t)), relay.WithBackoff(func(int) time.Duration { return 0 })}
	r, err := relay.New(db, pub, append(base, opts...)...)
	must(t, err)
	return r
}

// startRelay runs r.Start until t ends (or the returned stop is called).
func startRelay(t testing.TB, r *relay.Relay) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("relay Start: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// emitN writes n events of topic in transactions of up to 500.
func emitN(t testing.TB, db *gorm.DB, n int, topic string) {
	t.Helper()
	testenv.Emit(t, db, n, func(i int) outbox.Event {
		return outbox.Event{
			ID: fmt.Sprintf("ev-%06d", i), Type: "order.created", Topic: topic,
			AggregateType: "order", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i},
		}
	})
}

func countStatus(t testing.TB, db *gorm.DB, s outbox.Status) int64 {
	t.Helper()
	var n int64
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", string(s)).Count(&n).Error)
	return n
}
