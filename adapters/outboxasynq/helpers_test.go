package outboxasynq_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger logs to the test output with OUTBOX_TEST_LOG=1, else nowhere.
func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// newClient returns an asynq client of addr, closed when t ends.
func newClient(t testing.TB, addr string) *asynq.Client {
	t.Helper()
	c := asynq.NewClient(asynq.RedisClientOpt{Addr: addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func newInspector(t testing.TB, addr string) *asynq.Inspector {
	t.Helper()
	i := asynq.NewInspector(asynq.RedisClientOpt{Addr: addr})
	t.Cleanup(func() { _ = i.Close() })
	return i
}

// newQueue returns a unique queue name whose keys are deleted when t ends.
func newQueue(t testing.TB, addr string) string {
	t.Helper()
	q := testenv.Name("oa")
	t.Cleanup(func() { deleteQueue(t, addr, q) })
	return q
}

// deleteQueue deletes every key of queue q (asynq hash-tags them
// "asynq:{q}:…") and its entry in the set of queues; nothing else of the
// shared Redis is touched.
func deleteQueue(t testing.TB, addr, q string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, "asynq:{"+q+"}:*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			must(t, rdb.Unlink(ctx, keys...).Err())
			keys = keys[:0]
		}
	}
	must(t, iter.Err())
	if len(keys) > 0 {
		must(t, rdb.Unlink(ctx, keys...).Err())
	}
	must(t, rdb.SRem(ctx, "asynq:queues", q).Err())
}

// startServer runs an asynq server on queue q with handler h until t ends.
func startServer(t testing.TB, addr, q string, concurrency int, h asynq.Handler, tweak ...func(*asynq.Config)) *asynq.Server {
	t.Helper()
	cfg := asynq.Config{
		Concurrency:              concurrency,
		Queues:                   map[string]int{q: 1},
		RetryDelayFunc:           func(int, error, *asynq.Task) time.Duration { return 50 * time.Millisecond },
		DelayedTaskCheckInterval: 100 * time.Millisecond,
		TaskCheckInterval:        20 * time.Millisecond,
		ShutdownTimeout:          5 * time.Second,
		LogLevel:                 asynq.FatalLevel,
	}
	if os.Getenv("OUTBOX_TEST_LOG") == "1" {
		cfg.LogLevel = asynq.InfoLevel
	}
	for _, f := range tweak {
		f(&cfg)
	}
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, cfg)
	must(t, srv.Start(h))
	t.Cleanup(srv.Shutdown)
	return srv
}

// pgDB opens a fresh PostgreSQL database with the outbox and the
// idempotency store migrated.
func pgDB(t testing.TB) (*gorm.DB, *idempotency.Store) {
	t.Helper()
	db := testenv.Open(t, testenv.Postgres)
	return setupDB(t, db)
}

func setupDB(t testing.TB, db *gorm.DB) (*gorm.DB, *idempotency.Store) {
	t.Helper()
	// database/sql keeps 2 idle connections by default: concurrent asynq
	// workers would open (and PostgreSQL fork) a connection per statement.
	if db.Dialector.Name() != "sqlite" {
		sqlDB, err := db.DB()
		must(t, err)
		sqlDB.SetMaxIdleConns(16)
	}
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	store, err := idempotency.NewStore(db)
	must(t, err)
	must(t, store.Migrate(context.Background()))
	return db, store
}

func countStatus(t testing.TB, db *gorm.DB, s outbox.Status) int64 {
	t.Helper()
	var n int64
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", string(s)).Count(&n).Error)
	return n
}

// waitFor polls cond every 20ms until it holds, failing t after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counters counts calls per event id.
type counters struct{ m sync.Map }

func (c *counters) inc(id string) int32 {
	v, _ := c.m.LoadOrStore(id, new(atomic.Int32))
	return v.(*atomic.Int32).Add(1)
}

func (c *counters) get(id string) int32 {
	if v, ok := c.m.Load(id); ok {
		return v.(*atomic.Int32).Load()
	}
	return 0
}

func (c *counters) total() (n int) {
	c.m.Range(func(_, v any) bool { n += int(v.(*atomic.Int32).Load()); return true })
	return n
}

func eventID(i int) string { return fmt.Sprintf("ev-%05d", i) }

// emitN writes n events built by mk.
func emitN(t testing.TB, db *gorm.DB, n int, mk func(i int) outbox.Event) {
	t.Helper()
	testenv.Emit(t, db, n, mk)
}
