package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

func quiet() Option { return WithLogger(slog.New(slog.DiscardHandler)) }

func newConsumer(t *testing.T, f *fake, h Handler, opts ...Option) *Consumer {
	t.Helper()
	c, err := New(f, h, append([]Option{quiet()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// one handles the queued messages as one batch.
func one(t *testing.T, c *Consumer, f *fake) bool {
	t.Helper()
	msgs, err := f.Receive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c.handleBatch(context.Background(), msgs)
}

func TestOutcomesFollowTheHandlersError(t *testing.T) {
	errs := map[string]error{
		"ok":        nil,
		"perm":      outbox.Permanent(errors.New("bad")),
		"snooze":    outbox.Snooze(errors.New("later"), 7*time.Second),
		"busy":      fmt.Errorf("x: %w", idempotency.ErrInProgress),
		"fail":      errors.New("boom"),
		"last":      errors.New("boom"),
		"down":      outbox.Unavailable(errors.New("db down")),
		"notrunyet": nil, // after "down": released
	}
	f := &fake{}
	attempts := map[string]int{"fail": 2, "last": 3}
	for _, id := range []string{"ok", "perm", "snooze", "busy", "fail", "last", "down", "notrunyet"} {
		f.put(event(id, ""), max(attempts[id], 1))
	}
	var dead []DeadLetter
	c := newConsumer(t, f, HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error { return errs[e.ID] }),
		WithMaxDeliveries(3), WithRetryDelay(100*time.Millisecond),
		WithOnDead(func(_ context.Context, d DeadLetter) { dead = append(dead, d) }))
	if !one(t, c, f) {
		t.Error("Unavailable not reported")
	}
	want := map[string]settlement{
		"ok":        {kind: "ack"},
		"perm":      {kind: "dead"},
		"snooze":    {kind: "retry", delay: 7 * time.Second},
		"busy":      {kind: "retry", delay: 100 * time.Millisecond},
		"fail":      {kind: "retry", delay: 200 * time.Millisecond, counted: true},
		"last":      {kind: "dead"},
		"down":      {kind: "retry", delay: 100 * time.Millisecond},
		"notrunyet": {kind: "retry"},
	}
	for id, w := range want {
		got := f.settlements(id)
		if len(got) != 1 || got[0].kind != w.kind || got[0].delay != w.delay || got[0].counted != w.counted {
			t.Errorf("%s: settled %+v, want one %+v", id, got, w)
		}
	}
	if r := f.settlements("last")[0].reason; !errors.Is(r, ErrTooManyDeliveries) || !strings.Contains(r.Error(), "attempt 3 of 3") {
		t.Errorf("last attempt's reason: %v", r)
	}
	if len(dead) != 2 || dead[0].Envelope.ID != "perm" || dead[1].Delivery.Attempt != 3 || dead[1].Delivery.MaxAttempts != 3 {
		t.Errorf("OnDead got %+v", dead)
	}
}

func TestDeliveredAgainAfterTheLastRunIsDeadWithoutRunning(t *testing.T) {
	f := &fake{}
	f.put(event("e", ""), 4)
	ran := false
	c := newConsumer(t, f, HandlerFunc(func(context.Context, *outbox.Envelope) error { ran = true; return nil }), WithMaxDeliveries(3))
	one(t, c, f)
	got := f.settlements("e")
	if ran || len(got) != 1 || got[0].kind != "dead" || !errors.Is(got[0].reason, ErrTooManyDeliveries) {
		t.Errorf("ran %v, settled %+v", ran, got)
	}
}

func TestMalformedIsDeadAtOnce(t *testing.T) {
	f := &fake{}
	f.putRaw("junk", []byte("not json"), 1)
	c := newConsumer(t, f, HandlerFunc(func(context.Context, *outbox.Envelope) error { t.Error("handler ran"); return nil }))
	one(t, c, f)
	got := f.settlements("junk")
	if len(got) != 1 || got[0].kind != "dead" || !errors.Is(got[0].reason, ErrMalformed) {
		t.Errorf("settled %+v", got)
	}
}

func TestPanicIsACountedFailure(t *testing.T) {
	f := &fake{}
	f.put(event("e", ""), 1)
	c := newConsumer(t, f, HandlerFunc(func(context.Context, *outbox.Envelope) error { panic("kaboom") }))
	one(t, c, f)
	got := f.settlements("e")
	if len(got) != 1 || got[0].kind != "retry" || !got[0].counted {
		t.Errorf("settled %+v", got)
	}
}

func TestHandlerTimeoutEndsTheRunsContext(t *testing.T) {
	f := &fake{}
	f.put(event("e", ""), 1)
	c := newConsumer(t, f, HandlerFunc(func(ctx context.Context, _ *outbox.Envelope) error {
		<-ctx.Done()
		return ctx.Err()
	}), WithHandlerTimeout(20*time.Millisecond))
	one(t, c, f)
	if got := f.settlements("e"); len(got) != 1 || got[0].kind != "retry" || !got[0].counted {
		t.Errorf("settled %+v", got)
	}
}

func TestAKeyRunsInOrderAndStopsAtAFailure(t *testing.T) {
	f := &fake{}
	for _, id := range []string{"a1", "b1", "a2", "a3", "b2", "c1"} {
		f.put(event(id, id[:1]), 1)
	}
	var (
		mu    sync.Mutex
		order []string
		busy  = map[string]bool{}
	)
	c := newConsumer(t, f, HandlerFunc(func(_ context.Context, e *outbox.Envelope) error {
		mu.Lock()
		if busy[e.PartitionKey] {
			t.Errorf("%s ran while its key ran", e.ID)
		}
		busy[e.PartitionKey] = true
		order = append(order, e.ID)
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		mu.Lock()
		busy[e.PartitionKey] = false
		mu.Unlock()
		if e.ID == "a2" {
			return errors.New("fails")
		}
		return nil
	}), WithConcurrency(3))
	one(t, c, f)
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	if _, ran := pos["a3"]; ran || pos["a1"] > pos["a2"] || pos["b1"] > pos["b2"] {
		t.Errorf("order %v", order)
	}
	if got := f.settlements("a3"); len(got) != 1 || got[0].kind != "retry" || got[0].counted {
		t.Errorf("a3 after a failed a2: %+v, want released", got)
	}
}

func TestTransportOrderKeyOverridesThePartitionKey(t *testing.T) {
	f := &fake{}
	c := newConsumer(t, f, HandlerFunc(func(context.Context, *outbox.Envelope) error { return errors.New("no") }))
	m1, m2 := f.put(event("x", "k1"), 1), f.put(event("y", "k2"), 1)
	m1.key, m2.key = "p0", "p0"
	f.queue = nil
	c.handleBatch(context.Background(), []Message{keyedMsg{m1}, keyedMsg{m2}})
	if got := f.settlements("y"); len(got) != 1 || got[0].counted {
		t.Errorf("y shares x's partition: %+v, want released", got)
	}
}

func TestBeginWaitAndGone(t *testing.T) {
	f := &fake{}
	w := f.put(event("w", "k"), 1)
	f.put(event("w2", "k"), 1)
	g := f.put(event("g", "j"), 1)
	f.put(event("g2", "j"), 1)
	w.start, g.start = Wait, Gone
	var ran []string
	c := newConsumer(t, f, HandlerFunc(func(_ context.Context, e *outbox.Envelope) error { ran = append(ran, e.ID); return nil }))
	one(t, c, f)
	if len(f.settlements("g")) != 0 || len(ran) != 1 || ran[0] != "g2" {
		t.Errorf("gone settled %v, ran %v", f.settlements("g"), ran)
	}
	for _, id := range []string{"w", "w2"} {
		if got := f.settlements(id); len(got) != 1 || got[0].kind != "retry" || got[0].counted {
			t.Errorf("%s: %+v", id, got)
		}
	}
}

func TestRunPausesAfterUnavailableAndStopsReleasingTheRest(t *testing.T) {
	f := &fake{batch: 2}
	f.put(event("a", ""), 1)
	f.put(event("b", ""), 1)
	f.put(event("c", ""), 1)
	var calls atomic.Int32
	c := newConsumer(t, f, HandlerFunc(func(context.Context, *outbox.Envelope) error {
		if calls.Add(1) == 1 {
			return outbox.Unavailable(errors.New("down"))
		}
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// a: unavailable, b: released unstarted; c waits for the pause (1s),
	// longer than the run.
	if calls.Load() != 1 || len(f.settlements("c")) != 0 || !f.closed {
		t.Errorf("calls %d, c %+v, closed %v", calls.Load(), f.settlements("c"), f.closed)
	}
	if got := f.settlements("b"); len(got) != 1 || got[0].counted {
		t.Errorf("b: %+v", got)
	}
}

func TestRunningTwiceIsRefused(t *testing.T) {
	f := &fake{}
	c := newConsumer(t, f, HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	time.Sleep(20 * time.Millisecond)
	if err := c.Run(ctx); !errors.Is(err, ErrRunning) {
		t.Errorf("second Run: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}

func TestRunRetriesAFailedReceive(t *testing.T) {
	f := &fake{recvErr: errors.New("broker hiccup")}
	f.put(event("e", ""), 1)
	c := newConsumer(t, f, HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil && len(f.settlements("e")) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_ = c.Run(ctx)
	if got := f.settlements("e"); len(got) != 1 || got[0].kind != "ack" {
		t.Errorf("after a failed receive: %+v", got)
	}
}

func TestBackoffDoublesToItsCeiling(t *testing.T) {
	c := newConsumer(t, &fake{}, HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil }),
		WithRetryDelay(time.Second), WithMaxRetryDelay(5*time.Second))
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 40: 5 * time.Second} {
		if got := c.backoff(n); got != want {
			t.Errorf("backoff(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestDeliveryAndEnvelopeReachTheHandler(t *testing.T) {
	f := &fake{}
	f.put(event("e", ""), 2)
	var d Delivery
	var env *outbox.Envelope
	c := newConsumer(t, f, HandlerFunc(func(ctx context.Context, _ *outbox.Envelope) error {
		d, _ = DeliveryFrom(ctx)
		env, _ = EnvelopeFrom(ctx)
		return nil
	}), WithMaxDeliveries(5))
	one(t, c, f)
	if d.System != "fake" || d.Destination != "q" || d.Attempt != 2 || d.MaxAttempts != 5 || d.Details != "e" || d.LastAttempt() {
		t.Errorf("delivery %+v", d)
	}
	if env == nil || env.ID != "e" {
		t.Errorf("envelope %+v", env)
	}
}
