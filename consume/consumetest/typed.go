package consumetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
)

// typedAndRegistry: a typed handler with a registry receives decoded
// payloads; an event the registry does not know and a payload that does
// not decode into the handler's type are dead at once (ErrBadPayload).
func typedAndRegistry(t *testing.T, h *Harness) {
	e := newEnv(t, h)
	reg := outbox.NewRegistry()
	if err := outbox.Register[payload](reg, typ, 1); err != nil {
		t.Fatal(err)
	}
	good := e.emit([]string{"t"}, 5, typ)
	unknown := e.emit([]string{""}, 1, "consumetest.unregistered")
	var bad string
	err := e.db.Transaction(func(tx *gorm.DB) error {
		bad = "ct-bad-" + good[0]
		return outbox.Emit(tx, outbox.Event{ID: bad, Type: typ, Topic: e.dest, Payload: []byte(`{"seq":"not a number"}`)})
	})
	if err != nil {
		t.Fatal(err)
	}
	e.startRelay()
	var mu sync.Mutex
	got := map[string]payload{}
	dead := map[string]error{}
	hd := consume.HandlerOf(func(ctx context.Context, p payload) error {
		ev, ok := consume.EnvelopeFrom(ctx)
		if !ok {
			return errors.New("no envelope in the typed handler's context")
		}
		mu.Lock()
		defer mu.Unlock()
		got[ev.ID] = p
		return nil
	}, consume.Registered(reg))
	e.consumer("c1", hd, consume.WithOnDead(func(_ context.Context, d consume.DeadLetter) {
		mu.Lock()
		defer mu.Unlock()
		dead[d.Envelope.ID] = d.Reason
	}))
	e.waitFor(60*time.Second, "5 decoded and 2 dead", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 5 && len(dead) == 2
	}, func() string {
		mu.Lock()
		defer mu.Unlock()
		return fmt.Sprintf("decoded %v, dead %v", got, dead)
	})
	mu.Lock()
	defer mu.Unlock()
	for i, id := range good {
		if p, ok := got[id]; !ok || p.Seq != i || p.Key != "t" {
			t.Errorf("event %s decoded as %+v (%v)", id, p, ok)
		}
	}
	for _, id := range []string{unknown[0], bad} {
		if err := dead[id]; !errors.Is(err, consume.ErrBadPayload) || !outbox.IsPermanent(err) {
			t.Errorf("event %s: dead with %v, want ErrBadPayload (permanent)", id, err)
		}
	}
}

// gracefulStop: a consumer stopped mid-batch finishes the message in
// hand and releases the rest; run again, it handles them, none counted
// twice and none lost.
func gracefulStop(t *testing.T, h *Harness) {
	e := newEnv(t, h)
	ids := e.emit([]string{""}, 30, typ)
	e.startRelay()
	var mu sync.Mutex
	attempts := map[string]int{}
	hd := e.idempotentEffect("stop", func(ctx context.Context, ev *outbox.Envelope) error {
		time.Sleep(30 * time.Millisecond)
		d, _ := consume.DeliveryFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		attempts[ev.ID] = d.Attempt
		return nil
	})
	c := h.NewConsumer(t, e.dest, "c1", hd, append(append([]consume.Option{consume.WithLogger(quiet(t))}, h.Options...),
		consume.WithRetryDelay(20*time.Millisecond))...)
	for round := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		if round < 2 {
			before := len(e.effects())
			e.waitFor(60*time.Second, "5 more effects", func() bool { return len(e.effects()) >= before+5 },
				func() string { return fmt.Sprint(len(e.effects())) })
		} else {
			e.waitEffects(ids, 60*time.Second)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return 30s after its context ended")
		}
	}
	e.requireOnce(ids, e.effects())
	mu.Lock()
	defer mu.Unlock()
	for id, a := range attempts {
		if a != 1 {
			t.Errorf("event %s: handled at attempt %d; messages released by a stop were counted", id, a)
		}
	}
}
