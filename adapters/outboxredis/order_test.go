package outboxredis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
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

// enter marks a handler of key running until the returned func is called.
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

func (l *keyLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.successes {
		n += s
	}
	return n
}

// check verifies that every key's effects are its events in commit order,
// poisoned ones left out, and that every event took effect once.
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

// keyedEvents makes keys × perKey events interleaved over the keys, every
// poisonEvery-th of a key poisoned (0: none), and returns what keyLog
// should see.
func keyedEvents(keys, perKey, poisonEvery int) (func(i int) outbox.Event, map[string][]int) {
	want := map[string][]int{}
	mk := func(i int) outbox.Event {
		key, pos := fmt.Sprintf("k%d", i%keys), i/keys
		return outbox.Event{
			ID: fmt.Sprintf("ev-%05d", i), Type: "t", PartitionKey: key,
			Payload: keyedPayload{Key: key, I: pos, Poison: poisonEvery > 0 && pos%poisonEvery == poisonEvery-1},
		}
	}
	for i := range keys * perKey {
		p := mk(i).Payload.(keyedPayload)
		if !p.Poison {
			want[p.Key] = append(want[p.Key], p.I)
		}
	}
	return mk, want
}

// orderedHandler sleeps a random while, fails permanently the poisoned
// events and transiently a fifth of the first attempts, and records its
// effects in log.
func orderedHandler(log *keyLog) consume.Handler {
	return consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		var p keyedPayload
		if err := e.Unmarshal(&p); err != nil {
			return outbox.Permanent(err)
		}
		leave := log.enter(p.Key, p.I)
		defer leave()
		time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
		if p.Poison {
			return outbox.Permanent(errors.New("poisoned"))
		}
		if d, _ := consume.DeliveryFrom(ctx); d.Attempt == 1 && rand.IntN(5) == 0 {
			return errors.New("transient failure")
		}
		log.effect(p.Key, p.I, e.ID)
		return nil
	})
}

// TestKeyOrderAcrossConsumers relays keyed events into a stream read by
// three consumers in key order, whose handler takes random time and fails
// now and then: every key's effects happen in commit order, one handler
// of a key at a time, each event's once; a dead event does not hold up its
// key.
func TestKeyOrderAcrossConsumers(t *testing.T) {
	const keys, perKey = 5, 30
	rdb := newRedis(t)
	stream := streamName(t, rdb, "keyorder")
	db, _ := outboxDB(t, testenv.Postgres)
	mk, want := keyedEvents(keys, perKey, 10)
	testenv.Emit(t, db, keys*perKey, mk)

	log := newKeyLog()
	var dead deadRecorder
	for i := range 3 {
		c := newConsumer(t, rdb, stream, "g", fmt.Sprintf("c%d", i), orderedHandler(log), consumerOpts(t,
			outboxredis.WithKeyOrder(), consume.WithMaxDeliveries(3), consume.WithRetryDelay(20*time.Millisecond),
			outboxredis.WithMinIdle(5*time.Second), dead.option())...)
		run(t, c)
	}
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(stream), outboxredis.WithKeyChain())
	startRelay(t, newRelay(t, db, pub, relay.WithBatchSize(20)))

	wantEffects := 0
	for _, w := range want {
		wantEffects += len(w)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !(log.count() >= wantEffects && len(dead.reasons()) >= keys*perKey-wantEffects && settled(t, rdb, stream, "g")) {
		if time.Now().After(deadline) {
			p, _ := rdb.XPendingExt(t.Context(), &redis.XPendingExtArgs{Stream: stream, Group: "g", Start: "-", End: "+", Count: 20}).Result()
			t.Fatalf("timed out: %d of %d effects, %d dead, %d published; pending %+v",
				log.count(), wantEffects, len(dead.reasons()), countStatus(t, db, outbox.StatusPublished), p)
		}
		time.Sleep(10 * time.Millisecond)
	}
	log.check(t, want)
	if got := dead.reasons(); len(got) != keys*perKey-wantEffects {
		t.Errorf("dead: %v, want the %d poisoned events", got, keys*perKey-wantEffects)
	}
}
