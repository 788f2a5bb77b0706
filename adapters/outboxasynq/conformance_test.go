package outboxasynq_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/consume/consumetest"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// The consumer kit's conformance suite against asynq on the real Redis.
// A consumer of the suite is an asynq server on the queue (its Run starts
// one, and shuts it down when it returns) whose handler is Handler under
// KeyOrder, configured with IsFailure and RetryDelay; publishers chain
// keys (WithKeyChain) and dedupe by TaskID; the dead letter is the
// queue's archive; every client is made through a proxy that Outage cuts.
func TestConformance(t *testing.T) {
	addr := testenv.RedisAddr(t)
	direct := newRedis(t, addr)
	proxy := testenv.NewProxy(t, addr)
	client := func(t testing.TB) *redis.Client { return newRedis(t, proxy.Addr()) }
	consumetest.Exercise(t, consumetest.Harness{
		NewPublisher: func(t testing.TB) relay.Publisher {
			rdb := client(t)
			return outboxasynq.NewPublisher(asynq.NewClientFromRedisClient(rdb), outboxasynq.WithKeyChain(rdb),
				outboxasynq.WithLogger(testLogger(t)))
		},
		NewDest: func(t testing.TB) string {
			q := newQueue(t, addr)
			t.Cleanup(func() { dropChains(t, direct, q) })
			return q
		},
		NewConsumer: func(t testing.TB, dest, _ string, h consume.Handler, opts ...consume.Option) *consume.Consumer {
			s := &server{t: t, rdb: client(t), queue: dest, h: outboxasynq.Handler(h, opts...),
				concurrency: consume.SettingsOf(opts...).Concurrency}
			c, err := consume.New(s, h, opts...)
			must(t, err)
			return c
		},
		DeadLetters: func(t testing.TB, dest string) []string { return archivedEventIDs(t, direct, dest) },
		Outage: func(testing.TB) func() {
			proxy.Cut()
			return proxy.Restore
		},
		KeyOrderAcrossConsumers: true,
		BrokerDedupes:           true,
		Skip:                    longFaultCases(),
	})
}

// longFaultCases are the suite's cases too long for the everyday run:
// BrokerOutage takes from 4 s to minutes here (72 s in one run), for
// asynq v0.26 may lose a completion written while Redis was cut and hand
// the task out again only after its lease. They run with
// OUTBOX_FAULT_SUITE=1, as .ci/run sets, and are skipped, naming the
// variable, otherwise.
func longFaultCases() map[string]string {
	if testenv.FaultSuite() {
		return nil
	}
	return map[string]string{"BrokerOutage": testenv.FaultSuiteSkip}
}

// server is the transport of the suite's consumers: Receive runs an asynq
// server on the queue until the Consumer's Run ends, and Close shuts it
// down (a new one for the next Run). The policy is Handler's, on each task.
type server struct {
	t           testing.TB
	rdb         *redis.Client
	queue       string
	h           asynq.Handler
	concurrency int
	srv         *asynq.Server
}

func (s *server) System() string      { return "asynq" }
func (s *server) Destination() string { return s.queue }

func (s *server) Receive(ctx context.Context) ([]consume.Message, error) {
	if s.srv == nil {
		srv := asynq.NewServerFromRedisClient(s.rdb, asynq.Config{
			Concurrency: s.concurrency, Queues: map[string]int{s.queue: 1},
			IsFailure: outboxasynq.IsFailure, RetryDelayFunc: outboxasynq.RetryDelay(soon),
			DelayedTaskCheckInterval: 50 * time.Millisecond, TaskCheckInterval: 20 * time.Millisecond,
			ShutdownTimeout: 10 * time.Second, LogLevel: asynq.FatalLevel,
		})
		if err := srv.Start(outboxasynq.KeyOrder(s.rdb, 300*time.Millisecond)(s.h)); err != nil {
			return nil, err
		}
		s.srv = srv
	}
	<-ctx.Done()
	return nil, nil
}

func (s *server) Close(context.Context) error {
	if s.srv != nil {
		s.srv.Shutdown()
		s.srv = nil
	}
	return nil
}

// soon is the retry delay of what Handler did not hand back: a task that
// asynq's recoverer retries after its lease expired (a completion the
// outage lost), 15 to 45s by asynq's default.
func soon(int, error, *asynq.Task) time.Duration { return 100 * time.Millisecond }

// archivedEventIDs reads every page of queue's archive, and returns the
// ids of the events in it.
func archivedEventIDs(t testing.TB, rdb redis.UniversalClient, queue string) []string {
	t.Helper()
	dl := outboxasynq.NewDeadLetters(rdb, queue)
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

// dropChains deletes the key chains (WithKeyChain) whose last task is in
// queue: the suite's keys are the same in every case.
func dropChains(t testing.TB, rdb redis.UniversalClient, queue string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, outboxasynq.ChainKey("*"), 1000).Iterator()
	for iter.Next(ctx) {
		var last struct {
			Q string `json:"q"`
		}
		if v, err := rdb.Get(ctx, iter.Val()).Result(); err == nil && json.Unmarshal([]byte(v), &last) == nil && last.Q == queue {
			_ = rdb.Del(ctx, iter.Val()).Err()
		}
	}
	if err := iter.Err(); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Errorf("scanning the key chains: %v", err)
	}
}
