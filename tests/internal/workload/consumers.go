package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
)

func testLogger(t testing.TB) *slog.Logger {
	var w io.Writer = io.Discard
	if os.Getenv("OUTBOX_TEST_LOG") == "1" {
		w = testWriter{t}
	}
	return newLogger(w, slog.LevelDebug)
}

// Consumers run asynq servers or stream consumers in this process.
type Consumers struct {
	stop func()
	// dead counts messages the consumers gave up on.
	mu     sync.Mutex
	dead   int
	deadFn func() int
	// restart stops and starts the consumers again.
	restart func() error
	// explain describes what the transport holds of an event.
	explain func(id string) string
}

// Explain describes what the transport holds of each event (for a failure
// message).
func (c *Consumers) Explain(ids []string) string {
	if c.explain == nil {
		return ""
	}
	var b strings.Builder
	for _, id := range ids {
		fmt.Fprintf(&b, "\n\t%s: %s", id, c.explain(id))
	}
	return b.String()
}

// Restart stops the consumers and starts them again (asynq servers only).
// A new asynq server's recoverer runs at once, instead of once a minute.
func (c *Consumers) Restart() error {
	if c.restart == nil {
		return errors.New("these consumers cannot restart")
	}
	return c.restart()
}

// Stop stops every consumer.
func (c *Consumers) Stop() { c.stop() }

// Dead is how many messages went dead on the consumer side.
func (c *Consumers) Dead() int {
	if c.deadFn != nil {
		return c.deadFn()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// StartAsynqServers starts n asynq servers on the queue, whose handler
// writes each event's effect under consume.IdempotentTx (exactly once).
// They stop when t ends.
func StartAsynqServers(t testing.TB, db *gorm.DB, redisAddr string, n int) *Consumers {
	t.Helper()
	store, err := idempotency.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		srvs []*asynq.Server
	)
	start := func() error {
		mu.Lock()
		defer mu.Unlock()
		for i := range n {
			srv, err := startAsynqServer(store, redisAddr, fmt.Sprintf("asynq-%d", i))
			if err != nil {
				return err
			}
			srvs = append(srvs, srv)
		}
		return nil
	}
	shutdown := func() {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range srvs {
			s.Shutdown()
		}
		srvs = nil
	}
	if err := start(); err != nil {
		t.Fatalf("starting asynq servers: %v", err)
	}
	var once sync.Once
	c := &Consumers{stop: func() { once.Do(shutdown) }}
	c.restart = func() error { shutdown(); return start() }
	// Archived tasks: asynq gave up on them.
	c.deadFn = func() int {
		in := asynq.NewInspectorFromRedisClient(redis.NewClient(redisOptions(redisAddr)))
		defer in.Close()
		info, err := in.GetQueueInfo(QueueName)
		if err != nil {
			t.Errorf("reading the asynq queue: %v", err)
			return 0
		}
		return info.Archived
	}
	c.explain = func(id string) string {
		in := asynq.NewInspectorFromRedisClient(redis.NewClient(redisOptions(redisAddr)))
		defer in.Close()
		info, err := in.GetTaskInfo(QueueName, id)
		if err != nil {
			return "asynq: " + err.Error()
		}
		return fmt.Sprintf("asynq task %s, retried %d, last error %q, next process at %v, completed at %v",
			info.State, info.Retried, info.LastErr, info.NextProcessAt, info.CompletedAt)
	}
	t.Cleanup(c.Stop)
	return c
}

func startAsynqServer(store *idempotency.Store, redisAddr, name string) (*asynq.Server, error) {
	b := Behavior{Worker: name}
	srv := asynq.NewServerFromRedisClient(redis.NewClient(redisOptions(redisAddr)), asynq.Config{
		Concurrency:              8,
		Queues:                   map[string]int{QueueName: 1},
		IsFailure:                outboxasynq.IsFailure,
		RetryDelayFunc:           outboxasynq.RetryDelay(func(int, error, *asynq.Task) time.Duration { return 300 * time.Millisecond }),
		Logger:                   quietAsynq{},
		ShutdownTimeout:          5 * time.Second,
		TaskCheckInterval:        100 * time.Millisecond,
		DelayedTaskCheckInterval: 500 * time.Millisecond,
	})
	mux := asynq.NewServeMux()
	h := outboxasynq.Handler(consume.IdempotentTx(store, HandlerName, func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		return b.handle(ctx, tx, e, nil)
	}), consume.WithLogger(newLogger(io.Discard, slog.LevelError)), consume.WithRetryDelay(300*time.Millisecond),
		consume.WithMaxRetryDelay(300*time.Millisecond))
	mux.Handle(TypeWork, h)
	mux.Handle(TypeProbe, h)
	if err := srv.Start(mux); err != nil {
		return nil, err
	}
	return srv, nil
}

// quietAsynq drops asynq's own logs (its outage warnings are expected).
type quietAsynq struct{}

func (quietAsynq) Debug(...any) {}
func (quietAsynq) Info(...any)  {}
func (quietAsynq) Warn(...any)  {}
func (quietAsynq) Error(...any) {}
func (quietAsynq) Fatal(args ...any) {
	panic(fmt.Sprint(args...))
}

// StartStreamConsumers starts n consumers of the stream in one group,
// whose handler writes each event's effect under consume.IdempotentTx
// (exactly once). They stop when t ends.
func StartStreamConsumers(t testing.TB, db *gorm.DB, redisAddr string, n int) *Consumers {
	t.Helper()
	store, err := idempotency.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	c := &Consumers{}
	for i := range n {
		name := fmt.Sprintf("stream-%d", i)
		b := Behavior{Worker: name}
		rdb := redis.NewClient(redisOptions(redisAddr))
		h := consume.IdempotentTx(store, HandlerName, func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
			return b.handle(ctx, tx, e, nil)
		})
		cons, err := outboxredis.NewConsumer(rdb, StreamName, GroupName, name, h,
			outboxredis.WithBlock(500*time.Millisecond), outboxredis.WithMinIdle(10*time.Second),
			consume.WithRetryDelay(300*time.Millisecond), consume.WithMaxRetryDelay(300*time.Millisecond),
			consume.WithLogger(testLogger(t)), outboxredis.WithDeadLetterStream(StreamName+":dead"),
			consume.WithOnDead(func(context.Context, consume.DeadLetter) {
				c.mu.Lock()
				c.dead++
				c.mu.Unlock()
			}))
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			defer rdb.Close()
			if err := cons.Run(ctx); err != nil {
				t.Errorf("stream consumer %s: %v", name, err)
			}
		})
	}
	var once sync.Once
	c.stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(c.Stop)
	return c
}
