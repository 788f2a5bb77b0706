package consumetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"testing"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
)

// typ is the type of the suite's events.
const typ = "consumetest.happened"

// effectsOnce: events published by a relay and consumed by two consumers
// with an idempotent handler have their effect once each, and the two
// share the messages (each message goes to one of them).
func effectsOnce(t *testing.T, h *Harness) {
	e := newEnv(t, h)
	ids := e.emit([]string{"", "k1", "k2"}, 40, typ)
	e.startRelay()
	var runs atomic.Int64
	once := e.idempotentEffect("once", nil)
	hd := consume.HandlerFunc(func(ctx context.Context, ev *outbox.Envelope) error {
		runs.Add(1)
		return once.Handle(ctx, ev)
	})
	e.consumer("c1", hd)
	e.consumer("c2", hd)
	e.waitEffects(ids, 60*time.Second)
	time.Sleep(200 * time.Millisecond) // a late duplicate would show now
	e.requireOnce(ids, e.effects())
	// Nothing failed: each event reached a handler about once. Twice as
	// many deliveries means each consumer got every message (two groups,
	// not one shared by both).
	if n := runs.Load(); n > int64(len(ids)+len(ids)/2) {
		t.Errorf("%d deliveries of %d events: the consumers of one destination do not share its messages", n, len(ids))
	}
}

// duplicatesAtOnce: each event published twice (as a relay whose lease
// ran out would) and consumed by two consumers at once: the idempotency
// middleware lets one run have the effect.
func duplicatesAtOnce(t *testing.T, h *Harness) {
	e := newEnv(t, h)
	ids := e.emit([]string{""}, 30, typ)
	pub := h.NewPublisher(t)
	twice := publishTwice{pub}
	e.startRelayWith(twice)
	var runs atomic.Int64
	hd := e.idempotentEffect("dup", func(context.Context, *outbox.Envelope) error {
		runs.Add(1)
		time.Sleep(5 * time.Millisecond) // widen the window in which both copies run
		return nil
	})
	e.consumer("c1", hd, consume.WithConcurrency(4))
	e.consumer("c2", hd, consume.WithConcurrency(4))
	e.waitEffects(ids, 60*time.Second)
	time.Sleep(300 * time.Millisecond)
	e.requireOnce(ids, e.effects())
	t.Logf("%d events published twice; the effect ran %d times (the rest skipped as done or in progress)", len(ids), runs.Load())
}

// publishTwice publishes every event twice.
type publishTwice struct {
	pub interface {
		Publish(ctx context.Context, e *outbox.Envelope) error
	}
}

func (p publishTwice) Publish(ctx context.Context, e *outbox.Envelope) error {
	if err := p.pub.Publish(ctx, e); err != nil {
		return err
	}
	return p.pub.Publish(ctx, e)
}

// dependencyDown: a handler whose own dependency is down returns
// outbox.Unavailable: the consumer pauses, nothing is dead, and those runs
// do not count (every success is Attempt 1).
func dependencyDown(t *testing.T, h *Harness) {
	e := newEnv(t, h)
	ids := e.emit([]string{""}, 20, typ)
	e.startRelay()
	upAt := time.Now().Add(1500 * time.Millisecond)
	var downCalls atomic.Int64
	var mu sync.Mutex
	attempts := map[string]int{}
	var dead atomic.Int64
	hd := e.idempotentEffect("dep", func(ctx context.Context, ev *outbox.Envelope) error {
		if time.Now().Before(upAt) {
			downCalls.Add(1)
			return outbox.Unavailable(errors.New("the handler's database is down"))
		}
		d, _ := consume.DeliveryFrom(ctx)
		mu.Lock()
		attempts[ev.ID] = d.Attempt
		mu.Unlock()
		return nil
	})
	e.consumer("c1", hd, consume.WithMaxDeliveries(2),
		consume.WithOnDead(func(context.Context, consume.DeadLetter) { dead.Add(1) }))
	e.waitEffects(ids, 60*time.Second)
	e.requireOnce(ids, e.effects())
	if dead.Load() != 0 {
		t.Errorf("%d messages dead while the handler's dependency was down", dead.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for id, a := range attempts {
		if a != 1 {
			t.Errorf("event %s succeeded on attempt %d: runs that found the dependency down were counted", id, a)
		}
	}
	// The consumer pauses after an Unavailable (1s, doubling): a handful
	// of runs, not one per message per retry delay.
	if n := downCalls.Load(); n > 8 {
		t.Errorf("the handler was called %d times while its dependency was down: the consumer did not pause", n)
	}
}

// poisonDeadLettered: a message its handler refuses for good
// (outbox.Permanent) goes to the dead letter, once, and the others,
// of its key too, are handled.
func poisonDeadLettered(t *testing.T, h *Harness) {
	e := newEnv(t, h)
	ids := e.emit([]string{"p"}, 10, typ)
	poison := ids[3]
	e.startRelay()
	var onDead []consume.DeadLetter
	var mu sync.Mutex
	hd := e.idempotentEffect("poison", func(_ context.Context, ev *outbox.Envelope) error {
		if ev.ID == poison {
			return outbox.Permanent(errors.New("this event can never be handled"))
		}
		return nil
	})
	e.consumer("c1", hd, consume.WithOnDead(func(_ context.Context, d consume.DeadLetter) {
		mu.Lock()
		defer mu.Unlock()
		onDead = append(onDead, d)
	}))
	rest := append(append([]string{}, ids[:3]...), ids[4:]...)
	e.waitEffects(rest, 60*time.Second)
	e.waitFor(30*time.Second, "the poison message in the dead letter", func() bool {
		for _, id := range h.DeadLetters(t, e.dest) {
			if id == poison {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprint(h.DeadLetters(t, e.dest)) })
	e.requireOnce(rest, e.effects())
	if dl := h.DeadLetters(t, e.dest); len(dl) != 1 {
		t.Errorf("dead letter holds %v, want only %s", dl, poison)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(onDead) != 1 || onDead[0].Envelope == nil || onDead[0].Envelope.ID != poison || !outbox.IsPermanent(onDead[0].Reason) {
		t.Errorf("OnDead got %+v", onDead)
	}
}

// maxDeliveries: a handler that always fails runs WithMaxDeliveries
// times, its Delivery counting 1 to the most, and the message is dead.
func maxDeliveries(t *testing.T, h *Harness) {
	e := newEnv(t, h)
	ids := e.emit([]string{""}, 1, typ)
	e.startRelay()
	var mu sync.Mutex
	var seen []int
	deadCh := make(chan consume.DeadLetter, 1)
	hd := consume.HandlerFunc(func(ctx context.Context, _ *outbox.Envelope) error {
		d, _ := consume.DeliveryFrom(ctx)
		mu.Lock()
		seen = append(seen, d.Attempt)
		mu.Unlock()
		return errors.New("always fails")
	})
	e.consumer("c1", hd, consume.WithMaxDeliveries(3),
		consume.WithOnDead(func(_ context.Context, d consume.DeadLetter) { deadCh <- d }))
	select {
	case d := <-deadCh:
		if !errors.Is(d.Reason, consume.ErrTooManyDeliveries) || d.Delivery.Attempt != 3 {
			t.Errorf("dead with %v at attempt %d, want ErrTooManyDeliveries at 3", d.Reason, d.Delivery.Attempt)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("not dead after 60s")
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[1 2 3]" {
		t.Errorf("attempts seen %v, want [1 2 3]", seen)
	}
	e.waitFor(30*time.Second, "the message in the dead letter", func() bool {
		dl := h.DeadLetters(t, e.dest)
		return len(dl) == 1 && dl[0] == ids[0]
	}, func() string { return fmt.Sprint(h.DeadLetters(t, e.dest)) })
}
