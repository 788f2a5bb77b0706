package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// calls counts handler runs per event id.
type calls struct {
	mu sync.Mutex
	n  map[string]int
	d  map[string]outboxamqp.Delivery // the last Delivery of each
}

func newCalls() *calls { return &calls{n: map[string]int{}, d: map[string]outboxamqp.Delivery{}} }

func (c *calls) add(ctx context.Context, e *outbox.Envelope) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[e.ID]++
	c.d[e.ID], _ = outboxamqp.DeliveryFrom(ctx)
	return c.n[e.ID]
}

func (c *calls) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// deadRecorder collects the dead messages of a consumer.
type deadRecorder struct {
	mu   sync.Mutex
	msgs []outboxamqp.DeadMessage
}

func (r *deadRecorder) option() outboxamqp.ConsumerOption {
	return outboxamqp.WithOnDead(func(_ context.Context, d outboxamqp.DeadMessage) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.msgs = append(r.msgs, d)
	})
}

func (r *deadRecorder) byID() map[string]outboxamqp.DeadMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := map[string]outboxamqp.DeadMessage{}
	for _, d := range r.msgs {
		m[d.Message.MessageId] = d
	}
	return m
}

// publish sends envelopes to q with a Publisher.
func publish(t testing.TB, q string, es ...*outbox.Envelope) {
	t.Helper()
	pub := newPublisher(t, dial(t))
	for i, err := range pub.PublishBatch(context.Background(), es) {
		if err != nil {
			t.Fatalf("publishing %s: %v", es[i].ID, err)
		}
	}
}

// deadLettered declares a queue whose rejected messages go to a second
// queue (through the default exchange), and returns both.
func deadLettered(t testing.TB, prefix string) (q, dlq string) {
	t.Helper()
	dlq = queue(t, prefix+"-dead", nil)
	q = queue(t, prefix, amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
	return q, dlq
}

func TestConsumerAcksAfterSuccess(t *testing.T) {
	q := queue(t, "con-ack", nil)
	var es []*outbox.Envelope
	for i := range 30 {
		es = append(es, envelope(fmt.Sprint("ev-", i), "t", q))
	}
	publish(t, q, es...)
	seen := newCalls()
	c := newConsumer(t, dial(t), q, outboxamqp.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		seen.add(ctx, e)
		return nil
	}), outboxamqp.WithConcurrency(3), outboxamqp.WithPrefetch(5))
	stop := runConsumer(t, c)
	eventually(t, 10*time.Second, "every message handled", func() bool {
		for _, e := range es {
			if seen.of(e.ID) == 0 {
				return false
			}
		}
		return true
	})
	stop()
	for _, e := range es {
		if n := seen.of(e.ID); n != 1 {
			t.Errorf("%s handled %d times", e.ID, n)
		}
	}
	if d := seen.d["ev-0"]; d.Queue != q || d.Attempt != 1 || d.MaxAttempts != outboxamqp.DefaultMaxDeliveries || d.RoutingKey != q || d.DeliveryTag == 0 || d.Redelivered {
		t.Errorf("delivery %+v", d)
	}
	if n := depth(t, q); n != 0 {
		t.Errorf("%d messages left after the consumer stopped: not acknowledged", n)
	}
}

// A transient failure requeues the message until it succeeds or fails
// WithMaxDeliveries times; outbox.Permanent, a malformed message and too many
// failures make it dead (dead-lettered by the broker); Unavailable does not
// count.
func TestConsumerRetriesAndDeadLetters(t *testing.T) {
	q, dlq := deadLettered(t, "con-dead")
	seen := newCalls()
	h := outboxamqp.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		n := seen.add(ctx, e)
		switch e.ID {
		case "flaky":
			if n < 3 {
				return errors.New("not yet")
			}
		case "perm":
			return outbox.Permanent(errors.New("never"))
		case "always":
			return errors.New("always fails")
		case "unavailable":
			if n < 5 {
				return outbox.Unavailable(errors.New("its database is down"))
			}
		}
		return nil
	})
	var dead deadRecorder
	publish(t, q, envelope("flaky", "t", q), envelope("perm", "t", q), envelope("always", "t", q), envelope("unavailable", "t", q))
	must(t, admin(t).Publish("", q, false, false, amqp.Publishing{MessageId: "junk", Body: []byte("not an event")}))
	c := newConsumer(t, dial(t), q, h, outboxamqp.WithMaxDeliveries(3), dead.option())
	stop := runConsumer(t, c)
	eventually(t, 20*time.Second, "every message settled", func() bool {
		return len(dead.byID()) == 3 && seen.of("flaky") == 3 && seen.of("unavailable") == 5
	})
	stop()

	byID := dead.byID()
	if r := byID["perm"].Reason; !outbox.IsPermanent(r) {
		t.Errorf("perm dead for %v", r)
	}
	if r := byID["always"].Reason; !errors.Is(r, outboxamqp.ErrTooManyDeliveries) {
		t.Errorf("always dead for %v", r)
	}
	if r := byID["junk"].Reason; !errors.Is(r, outboxamqp.ErrMalformed) || !errors.Is(r, outbox.ErrInvalidEnvelope) || byID["junk"].Envelope != nil {
		t.Errorf("junk dead for %v", r)
	}
	for id, want := range map[string]int{"flaky": 3, "perm": 1, "always": 3, "unavailable": 5} {
		if n := seen.of(id); n != want {
			t.Errorf("%s handled %d times, want %d", id, n, want)
		}
	}
	if d := seen.d["flaky"]; d.Attempt != 3 || !d.Redelivered || !d.LastAttempt() {
		t.Errorf("flaky's last delivery %+v, want attempt 3 of 3, redelivered", d)
	}
	if d := seen.d["unavailable"]; d.Attempt != 1 {
		t.Errorf("unavailable's last delivery counts attempt %d, want 1: Unavailable must not count", d.Attempt)
	}
	var ids []string
	for _, m := range messages(t, dlq) {
		ids = append(ids, m.MessageId)
	}
	if len(ids) != 3 {
		t.Errorf("dead-letter queue holds %v, want perm, always and junk", ids)
	}
	if n := depth(t, q); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}

// A typed handler gets the decoded payload; a payload that does not decode
// is dead at once.
func TestTypedHandler(t *testing.T) {
	q := queue(t, "con-typed", nil)
	type Order struct{ ID string }
	var (
		mu  sync.Mutex
		got []string
	)
	h := outboxamqp.HandlerOf(func(ctx context.Context, o Order) error {
		e, ok1 := outboxamqp.EnvelopeFrom(ctx)
		d, ok2 := outboxamqp.DeliveryFrom(ctx)
		if !ok1 || !ok2 {
			return errors.New("no envelope or delivery in the context")
		}
		mu.Lock()
		defer mu.Unlock()
		got = append(got, e.ID+"="+o.ID+"@"+d.Queue)
		return nil
	})
	var dead deadRecorder
	publish(t, q, envelope("good", "t", q), &outbox.Envelope{ID: "bad", Type: "t", Topic: q, Payload: []byte(`{"ID":7}`)})
	stop := runConsumer(t, newConsumer(t, dial(t), q, h, dead.option()))
	eventually(t, 10*time.Second, "both settled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1 && len(dead.byID()) == 1
	})
	stop()
	if got[0] != "good=good@"+q {
		t.Errorf("handler saw %v", got)
	}
	if r := dead.byID()["bad"].Reason; !errors.Is(r, outboxamqp.ErrBadPayload) || !outbox.IsPermanent(r) {
		t.Errorf("bad payload dead for %v", r)
	}
	if _, err := outboxamqp.NewConsumer(dial(t), q, outboxamqp.HandlerOf[int](nil)); !errors.Is(err, outboxamqp.ErrInvalidOption) {
		t.Errorf("NewConsumer(HandlerOf(nil)): %v", err)
	}
}

// When Run's context ends, the message in hand is finished and
// acknowledged; the ones received but not started go back to the queue.
func TestConsumerStopsCleanly(t *testing.T) {
	q := queue(t, "con-stop", nil)
	var es []*outbox.Envelope
	for i := range 6 {
		es = append(es, envelope(fmt.Sprint("ev-", i), "t", q))
	}
	publish(t, q, es...)
	started, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	seen := newCalls()
	h := outboxamqp.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		seen.add(ctx, e)
		once.Do(func() { close(started) })
		<-release
		return nil
	})
	stop := runConsumer(t, newConsumer(t, dial(t), q, h, outboxamqp.WithPrefetch(10)))
	<-started
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Run returned with a handler running")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	<-stopped
	if n := depth(t, q); n != 5 {
		t.Errorf("%d messages back in the queue, want 5 (6 less the one finished)", n)
	}
	if n := seen.of("ev-0"); n != 1 {
		t.Errorf("the first message was handled %d times", n)
	}
}

// The consumer declares its queue with WithTopology, and outlives a
// connection cut: it dials again (WithDial) and handles what came meanwhile.
func TestConsumerRidesOutAnOutage(t *testing.T) {
	proxy := testenv.NewProxy(t, brokerAddr(t))
	q := testenv.Name("oamqp-con-outage")
	t.Cleanup(func() { deleteQueue(t, q) })
	seen := newCalls()
	h := outboxamqp.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error { seen.add(ctx, e); return nil })
	c := newConsumer(t, nil, q, h,
		outboxamqp.WithDial(outboxamqp.Dialer(viaProxy(t, proxy), amqp.Config{})),
		outboxamqp.WithTopology(func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(q, true, false, false, false, nil)
			return err
		}))
	stop := runConsumer(t, c)
	eventually(t, 10*time.Second, "the queue declared", func() bool {
		_, err := admin(t).QueueDeclarePassive(q, true, false, false, false, nil)
		return err == nil
	})
	publish(t, q, envelope("before", "t", q))
	eventually(t, 10*time.Second, "the event before the outage", func() bool { return seen.of("before") == 1 })

	proxy.Cut()
	publish(t, q, envelope("during", "t", q))
	time.Sleep(300 * time.Millisecond)
	if n := seen.of("during"); n != 0 {
		t.Fatalf("handled %d times through a cut connection", n)
	}
	proxy.Restore()
	eventually(t, 20*time.Second, "the event published during the outage", func() bool { return seen.of("during") == 1 })
	stop()
	if n := depth(t, q); n != 0 {
		t.Errorf("%d messages left", n)
	}
}

func TestNewConsumerRefusesBadArguments(t *testing.T) {
	h := outboxamqp.HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil })
	dialer := outboxamqp.WithDial(outboxamqp.Dialer("amqp://x", amqp.Config{}))
	for name, c := range map[string]struct {
		queue string
		h     outboxamqp.Handler
		opts  []outboxamqp.ConsumerOption
	}{
		"nil connection": {"q", h, nil},
		"empty queue":    {"", h, []outboxamqp.ConsumerOption{dialer}},
		"nil handler":    {"q", nil, []outboxamqp.ConsumerOption{dialer}},
		"prefetch 0":     {"q", h, []outboxamqp.ConsumerOption{dialer, outboxamqp.WithPrefetch(0)}},
		"concurrency 0":  {"q", h, []outboxamqp.ConsumerOption{dialer, outboxamqp.WithConcurrency(0)}},
		"max 0":          {"q", h, []outboxamqp.ConsumerOption{dialer, outboxamqp.WithMaxDeliveries(0)}},
		"retry 0":        {"q", h, []outboxamqp.ConsumerOption{dialer, outboxamqp.WithRetryDelay(0)}},
		"idempotent":     {"q", outboxamqp.Idempotent(nil, "x", h), []outboxamqp.ConsumerOption{dialer}},
	} {
		cons, err := outboxamqp.NewConsumer(nil, c.queue, c.h, c.opts...)
		if !errors.Is(err, outboxamqp.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
			continue
		}
		if err := cons.Run(t.Context()); !errors.Is(err, outboxamqp.ErrInvalidOption) {
			t.Errorf("%s: Run %v, want ErrInvalidOption", name, err)
		}
	}
}
