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
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// calls counts handler runs per event id, with the last Delivery of each.
type calls struct {
	mu sync.Mutex
	n  map[string]int
	d  map[string]consume.Delivery
}

func newCalls() *calls { return &calls{n: map[string]int{}, d: map[string]consume.Delivery{}} }

func (c *calls) add(ctx context.Context, e *outbox.Envelope) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[e.ID]++
	c.d[e.ID], _ = consume.DeliveryFrom(ctx)
	return c.n[e.ID]
}

func (c *calls) of(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

func (c *calls) delivery(id string) consume.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.d[id]
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
// queue, q+".dead" (through the default exchange), and returns both, with
// the topology that declares them.
func deadLettered(t testing.TB, prefix string) (q, dlq string, declare func(ch *amqp.Channel) error) {
	t.Helper()
	q = testenv.Name("oamqp-" + prefix)
	dlq = q + ".dead"
	declare = func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(dlq, true, false, false, false, nil); err != nil {
			return err
		}
		_, err := ch.QueueDeclare(q, true, false, false, false,
			amqp.Table{"x-dead-letter-exchange": "", "x-dead-letter-routing-key": dlq})
		return err
	}
	must(t, declare(admin(t)))
	t.Cleanup(func() { deleteQueue(t, q); deleteQueue(t, dlq) })
	return q, dlq, declare
}

// The handler's Delivery carries RabbitMQ's details; a failed message
// waits out its retry delay unacknowledged without holding back the rest
// of its batch, and comes back redelivered, its attempt counted; a message
// that is not an outbox event is rejected to the dead-letter queue.
func TestConsumerDetailsRetriesAndMalformed(t *testing.T) {
	q, dlq, _ := deadLettered(t, "con")
	var es []*outbox.Envelope
	for i := range 10 {
		es = append(es, envelope(fmt.Sprint("ev-", i), "t", q))
	}
	publish(t, q, es...)
	must(t, admin(t).Publish("", q, false, false, amqp.Publishing{MessageId: "junk", Body: []byte("not an event")}))
	seen := newCalls()
	var dead []consume.DeadLetter
	var mu sync.Mutex
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		if seen.add(ctx, e) == 1 && e.ID == "ev-0" {
			return errors.New("fails once")
		}
		return nil
	})
	c := newConsumer(t, dial(t), q, h, consume.WithRetryDelay(2*time.Second), outboxamqp.WithPrefetch(20),
		consume.WithOnDead(func(_ context.Context, d consume.DeadLetter) { mu.Lock(); dead = append(dead, d); mu.Unlock() }))
	stop := runConsumer(t, c)
	began := time.Now()
	eventually(t, 10*time.Second, "the other messages handled", func() bool { return seen.of("ev-9") == 1 })
	if d := time.Since(began); d > 1500*time.Millisecond || seen.of("ev-0") != 1 {
		t.Errorf("ev-9 handled %v after ev-0 failed (%d runs of ev-0): the retry delay held the batch", d, seen.of("ev-0"))
	}
	eventually(t, 10*time.Second, "ev-0 handled again", func() bool { return seen.of("ev-0") == 2 })
	stop()
	d := seen.delivery("ev-0")
	m, ok := d.Details.(outboxamqp.Message)
	if !ok || d.System != "rabbitmq" || d.Destination != q || d.Attempt != 2 || m.Queue != q || m.RoutingKey != q ||
		m.DeliveryTag == 0 || !m.Redelivered || m.MessageID != "ev-0" || m.Headers[outboxamqp.HeaderEventType] != "t" {
		t.Errorf("ev-0's second delivery %+v, details %+v", d, m)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(dead) != 1 || dead[0].Envelope != nil || !errors.Is(dead[0].Reason, consume.ErrMalformed) {
		t.Errorf("dead %+v, want the junk message, malformed", dead)
	} else if m, _ := dead[0].Delivery.Details.(outboxamqp.Message); string(m.Body) != "not an event" {
		t.Errorf("dead message's details %+v", m)
	}
	if got := messages(t, dlq); len(got) != 1 || got[0].MessageId != "junk" {
		t.Errorf("dead-letter queue holds %d messages, want the junk one", len(got))
	}
	if n := depth(t, q); n != 0 {
		t.Errorf("%d messages left in the queue", n)
	}
}

// The consumer declares its queue with WithConsumerTopology, and outlives
// a connection cut: it dials again (WithConsumerDial) and handles what
// came meanwhile.
func TestConsumerRidesOutAnOutage(t *testing.T) {
	proxy := testenv.NewProxy(t, brokerAddr(t))
	q := testenv.Name("oamqp-con-outage")
	t.Cleanup(func() { deleteQueue(t, q) })
	seen := newCalls()
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error { seen.add(ctx, e); return nil })
	c := newConsumer(t, nil, q, h,
		outboxamqp.WithConsumerDial(outboxamqp.Dialer(viaProxy(t, proxy), amqp.Config{})),
		outboxamqp.WithConsumerTopology(func(ch *amqp.Channel) error {
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
	h := consume.HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil })
	dialer := outboxamqp.WithConsumerDial(outboxamqp.Dialer("amqp://x", amqp.Config{}))
	for name, c := range map[string]struct {
		queue string
		h     consume.Handler
		opts  []consume.Option
	}{
		"nil connection":    {"q", h, nil},
		"empty queue":       {"", h, []consume.Option{dialer}},
		"nil handler":       {"q", nil, []consume.Option{dialer}},
		"prefetch 0":        {"q", h, []consume.Option{dialer, outboxamqp.WithPrefetch(0)}},
		"nil dial":          {"q", h, []consume.Option{outboxamqp.WithConsumerDial(nil)}},
		"nil topology":      {"q", h, []consume.Option{dialer, outboxamqp.WithConsumerTopology(nil)}},
		"long consumer tag": {"q", h, []consume.Option{dialer, outboxamqp.WithConsumerTag(string(make([]byte, 256)))}},
		"concurrency 0":     {"q", h, []consume.Option{dialer, consume.WithConcurrency(0)}},
		"idempotent":        {"q", consume.Idempotent(nil, "x", h), []consume.Option{dialer}},
		"another adapter's": {"q", h, []consume.Option{dialer, consume.TransportOption("other.WithX", func(*struct{}) error { return nil })}},
	} {
		if cons, err := outboxamqp.NewConsumer(nil, c.queue, c.h, c.opts...); !errors.Is(err, consume.ErrInvalidOption) || cons != nil {
			t.Errorf("%s: %v, want ErrInvalidOption and no consumer", name, err)
		}
	}
}
