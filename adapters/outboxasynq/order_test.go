package outboxasynq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// keyedPayload is the payload of the events of the key-order tests.
type keyedPayload struct {
	Key    string
	I      int  // position among the key's events, in commit order
	Poison bool // the handler fails it permanently
}

// keyLog records, per partition key, the order of handlers' effects and
// any two handlers of one key running at once.
type keyLog struct {
	mu         sync.Mutex
	inflight   map[string]int
	effects    map[string][]int
	successes  map[string]int // per event id
	violations []string
}

func newKeyLog() *keyLog {
	return &keyLog{inflight: map[string]int{}, effects: map[string][]int{}, successes: map[string]int{}}
}

func (l *keyLog) enter(key string, i int) (leave func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.inflight[key] > 0 {
		l.violations = append(l.violations, fmt.Sprintf("key %s: event %d started while another of its key ran", key, i))
	}
	l.inflight[key]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.inflight[key]--
	}
}

func (l *keyLog) effect(key string, i int, eventID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.effects[key] = append(l.effects[key], i)
	l.successes[eventID]++
}

func (l *keyLog) check(t *testing.T, want map[string][]int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.violations[:min(len(l.violations), 10)] {
		t.Error(v)
	}
	for key, w := range want {
		if got := l.effects[key]; !slices.Equal(got, w) {
			t.Errorf("key %s: effects in order %v, want %v", key, got, w)
		}
	}
	for id, n := range l.successes {
		if n != 1 {
			t.Errorf("event %s took effect %d times", id, n)
		}
	}
}

// chainKeys returns a unique prefix for the partition keys of a test, whose
// chains are deleted when t ends.
func chainKeys(t testing.TB, rdb *redis.Client) string {
	t.Helper()
	prefix := testenv.Name("key")
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, outboxasynq.ChainKey(prefix)+"*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		must(t, iter.Err())
		if len(keys) > 0 {
			must(t, rdb.Del(ctx, keys...).Err())
		}
	})
	return prefix
}

func newRedis(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TestKeyOrderAcrossWorkers relays keyed events into asynq, consumed by
// two servers of four workers each under KeyOrder, whose handler takes
// random time and fails now and then: every key's effects happen in
// commit order, one handler of a key at a time, each event's once; an
// archived (dead) task does not hold up its key.
func TestKeyOrderAcrossWorkers(t *testing.T) {
	const keys, perKey = 5, 30
	addr := testenv.RedisAddr(t)
	rdb := newRedis(t, addr)
	q := newQueue(t, addr)
	prefix := chainKeys(t, rdb)
	db, _ := pgDB(t)

	want := map[string][]int{}
	emitN(t, db, keys*perKey, func(i int) outbox.Event {
		key, pos := fmt.Sprintf("%s-%d", prefix, i%keys), i/keys
		p := keyedPayload{Key: key, I: pos, Poison: pos%10 == 9}
		if !p.Poison {
			want[key] = append(want[key], pos)
		}
		return outbox.Event{ID: eventID(i), Type: "keyed", Topic: q, PartitionKey: key, Payload: p}
	})

	log := newKeyLog()
	mux := asynq.NewServeMux()
	mux.Use(outboxasynq.KeyOrder(rdb, 300*time.Millisecond))
	mux.Handle("keyed", outboxasynq.Handler(consume.HandlerOf(func(ctx context.Context, p keyedPayload) error {
		leave := log.enter(p.Key, p.I)
		defer leave()
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		if p.Poison {
			return outbox.Permanent(errors.New("poisoned"))
		}
		if d, _ := consume.DeliveryFrom(ctx); d.Attempt == 1 && rand.IntN(5) == 0 {
			return errors.New("transient failure")
		}
		e, _ := consume.EnvelopeFrom(ctx)
		log.effect(p.Key, p.I, e.ID)
		return nil
	}), consume.WithLogger(testLogger(t)), consume.WithRetryDelay(20*time.Millisecond)))
	for range 2 {
		startServer(t, addr, q, 4, mux, func(c *asynq.Config) {
			c.IsFailure = outboxasynq.IsFailure
			c.RetryDelayFunc = outboxasynq.RetryDelay(nil)
		})
	}
	pub := outboxasynq.NewPublisher(newClient(t, addr), outboxasynq.WithKeyChain(rdb), outboxasynq.WithMaxRetry(3))
	r, err := relay.New(db, pub, relay.WithLogger(testLogger(t)), relay.WithBatchSize(20))
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(ctx) }()
	defer func() { cancel(); must(t, <-stopped) }()

	ins := newInspector(t, addr)
	waitFor(t, 90*time.Second, "every task settled", func() bool {
		qi, err := ins.GetQueueInfo(q)
		return err == nil && int(qi.Completed+qi.Archived) == keys*perKey
	})
	log.check(t, want)
	if qi, _ := ins.GetQueueInfo(q); qi.Archived != keys*perKey/10 {
		t.Errorf("%d tasks archived, want the %d poisoned", qi.Archived, keys*perKey/10)
	}
}

// WithKeyChain: each keyed task names the previous task of its key; a
// redelivered event (its task already enqueued) leaves the chain at it,
// also when the publisher died before recording it; unkeyed tasks name
// none.
func TestKeyChainNamesEachKeysPreviousTask(t *testing.T) {
	addr := testenv.RedisAddr(t)
	rdb := newRedis(t, addr)
	q := newQueue(t, addr)
	key := chainKeys(t, rdb)
	ins := newInspector(t, addr)
	pub := outboxasynq.NewPublisher(newClient(t, addr), outboxasynq.WithKeyChain(rdb))
	must(t, pub.Validate())
	keyed := func(id string) *outbox.Envelope {
		return &outbox.Envelope{ID: id, Type: "t", Topic: q, PartitionKey: key, Payload: []byte(`{}`)}
	}
	after := func(id string) string {
		t.Helper()
		info, err := ins.GetTaskInfo(q, id)
		must(t, err)
		if info.Headers[outboxasynq.HeaderAfterID] != "" && info.Headers[outboxasynq.HeaderAfterQueue] != q {
			t.Errorf("task %s: predecessor's queue %q, want %q", id, info.Headers[outboxasynq.HeaderAfterQueue], q)
		}
		return info.Headers[outboxasynq.HeaderAfterID]
	}
	must(t, pub.Publish(t.Context(), keyed("e1")))
	must(t, pub.Publish(t.Context(), keyed("e2")))
	must(t, pub.Publish(t.Context(), &outbox.Envelope{ID: "n1", Type: "t", Topic: q, Payload: []byte(`{}`)}))
	must(t, pub.Publish(t.Context(), keyed("e2"))) // a redelivery: task exists
	// The publisher died after enqueuing e3, before recording it.
	last, err := rdb.Get(t.Context(), outboxasynq.ChainKey(key)).Result()
	must(t, err)
	must(t, pub.Publish(t.Context(), keyed("e3")))
	must(t, rdb.Set(t.Context(), outboxasynq.ChainKey(key), last, 0).Err())
	must(t, pub.Publish(t.Context(), keyed("e3"))) // its redelivery records it
	must(t, pub.Publish(t.Context(), keyed("e4")))
	for id, want := range map[string]string{"e1": "", "e2": "e1", "n1": "", "e3": "e2", "e4": "e3"} {
		if got := after(id); got != want {
			t.Errorf("task %s names %q as its predecessor, want %q", id, got, want)
		}
	}
	if pub := outboxasynq.NewPublisher(newClient(t, addr), outboxasynq.WithKeyChain(nil)); !errors.Is(pub.Validate(), outboxasynq.ErrInvalidOption) {
		t.Errorf("WithKeyChain(nil): Validate = %v", pub.Validate())
	}
}

// KeyOrder runs a task whose predecessor completed, was archived or is
// gone, and holds one whose predecessor is pending: up to its wait in its
// worker, then with ErrPredecessorPending, which does not count.
func TestKeyOrderWaitsForAPendingPredecessor(t *testing.T) {
	addr := testenv.RedisAddr(t)
	rdb := newRedis(t, addr)
	q := newQueue(t, addr)
	client := newClient(t, addr)
	ran := &counters{}
	h := outboxasynq.KeyOrder(rdb, 50*time.Millisecond)(asynq.HandlerFunc(func(context.Context, *asynq.Task) error {
		ran.inc("run")
		return nil
	}))
	enqueue := func(id, after string, opts ...asynq.Option) {
		t.Helper()
		headers := map[string]string{}
		if after != "" {
			headers[outboxasynq.HeaderAfterQueue], headers[outboxasynq.HeaderAfterID] = q, after
		}
		_, err := client.Enqueue(asynq.NewTaskWithHeaders("t", nil, headers), append(opts, asynq.Queue(q), asynq.TaskID(id))...)
		must(t, err)
	}
	enqueue("pending", "")
	enqueue("waits", "pending")
	enqueue("after-gone", "never-enqueued")
	ins := newInspector(t, addr)
	info, err := ins.GetTaskInfo(q, "waits")
	must(t, err)
	start := time.Now()
	err = h.ProcessTask(t.Context(), asynq.NewTaskWithHeaders("t", nil, info.Headers))
	if !errors.Is(err, outboxasynq.ErrPredecessorPending) || outboxasynq.IsFailure(err) {
		t.Errorf("task after a pending one: %v (IsFailure %v), want ErrPredecessorPending, not a failure", err, outboxasynq.IsFailure(err))
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Errorf("gave up after %v, want the wait of 50ms", waited)
	}
	if d := outboxasynq.RetryDelay(nil)(0, err, nil); d != outboxasynq.TurnRetryDelay {
		t.Errorf("RetryDelay = %v, want %v", d, outboxasynq.TurnRetryDelay)
	}
	info, err = ins.GetTaskInfo(q, "after-gone")
	must(t, err)
	must(t, h.ProcessTask(t.Context(), asynq.NewTaskWithHeaders("t", nil, info.Headers)))
	must(t, ins.ArchiveTask(q, "pending"))
	info, err = ins.GetTaskInfo(q, "waits")
	must(t, err)
	must(t, h.ProcessTask(t.Context(), asynq.NewTaskWithHeaders("t", nil, info.Headers))) // its predecessor is dead
	if n := ran.get("run"); n != 2 {
		t.Errorf("the handler ran %d times, want 2", n)
	}
}
