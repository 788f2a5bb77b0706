package workload

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
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
	// Dead counts messages the consumers gave up on (stream dead letters).
	mu   sync.Mutex
	dead int
}

// Stop stops every consumer.
func (c *Consumers) Stop() { c.stop() }

// Dead is how many messages went dead on the consumer side.
func (c *Consumers) Dead() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dead
}

// StartAsynqServers starts n asynq servers on the queue, whose handler
// writes each event's effect under outboxasynq.IdempotentTx (exactly once).
// They stop when t ends.
func StartAsynqServers(t testing.TB, db *gorm.DB, redisAddr string, n int) *Consumers {
	t.Helper()
	store, err := idempotency.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	var srvs []*asynq.Server
	for i := range n {
		b := Behavior{Worker: fmt.Sprintf("asynq-%d", i)}
		srv := asynq.NewServerFromRedisClient(redis.NewClient(redisOptions(redisAddr)), asynq.Config{
			Concurrency:              8,
			Queues:                   map[string]int{QueueName: 1},
			IsFailure:                outboxasynq.IsFailure,
			RetryDelayFunc:           func(int, error, *asynq.Task) time.Duration { return 300 * time.Millisecond },
			Logger:                   quietAsynq{},
			ShutdownTimeout:          5 * time.Second,
			TaskCheckInterval:        100 * time.Millisecond,
			DelayedTaskCheckInterval: 500 * time.Millisecond,
		})
		mux := asynq.NewServeMux()
		mux.Use(outboxasynq.IdempotentTx(store, HandlerName))
		h := outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
			return b.handle(ctx, outboxasynq.Tx(ctx), e, nil)
		})
		mux.Handle(TypeWork, h)
		mux.Handle(TypeProbe, h)
		if err := srv.Start(mux); err != nil {
			t.Fatalf("starting asynq server %d: %v", i, err)
		}
		srvs = append(srvs, srv)
	}
	var once sync.Once
	c := &Consumers{stop: func() {
		once.Do(func() {
			for _, s := range srvs {
				s.Shutdown()
			}
		})
	}}
	t.Cleanup(c.Stop)
	return c
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
// whose handler writes each event's effect under outboxredis.IdempotentTx
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
		h := outboxredis.IdempotentTx(store, HandlerName, func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
			return b.handle(ctx, tx, e, nil)
		})
		cons := outboxredis.NewConsumer(rdb, StreamName, GroupName, name, h,
			outboxredis.WithBlock(500*time.Millisecond), outboxredis.WithMinIdle(10*time.Second),
			outboxredis.WithRetryDelay(300*time.Millisecond), outboxredis.WithConsumerLogger(testLogger(t)),
			outboxredis.WithDeadLetterStream(StreamName+":dead"),
			outboxredis.WithOnDead(func(context.Context, outboxredis.DeadMessage) {
				c.mu.Lock()
				c.dead++
				c.mu.Unlock()
			}))
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
