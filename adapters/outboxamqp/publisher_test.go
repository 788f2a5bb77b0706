package outboxamqp_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
)

// Every event becomes one persistent message whose id is the event id, whose
// body is the envelope's CloudEvents JSON, and whose headers carry the
// event's headers and fields.
func TestPublishBatchMessages(t *testing.T) {
	q := queue(t, "props", nil)
	pub := newPublisher(t, dial(t), outboxamqp.WithSource("shop-api"))
	e1 := envelope("ev-1", "order.created", q)
	e1.Version, e1.TenantID, e1.AggregateType, e1.AggregateID, e1.PartitionKey = 2, "acme", "order", "42", "order:42"
	e1.Headers = map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-custom": "yes", outboxamqp.HeaderEventType: "spoofed"}
	e2 := envelope("ev-2", "order.paid", q)
	for i, err := range pub.PublishBatch(t.Context(), []*outbox.Envelope{e1, e2}) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	got := messages(t, q)
	if len(got) != 2 {
		t.Fatalf("%d messages in the queue, want 2", len(got))
	}
	m := got[0]
	for what, c := range map[string][2]any{
		"message id":    {m.MessageId, "ev-1"},
		"type":          {m.Type, "order.created"},
		"content type":  {m.ContentType, outboxamqp.ContentType},
		"delivery mode": {m.DeliveryMode, amqp.Persistent},
		"app id":        {m.AppId, "shop-api"},
		"timestamp":     {m.Timestamp.Unix(), e1.CreatedAt.Unix()},
		"exchange":      {m.Exchange, ""},
		"routing key":   {m.RoutingKey, q},
	} {
		if c[0] != c[1] {
			t.Errorf("%s = %v, want %v", what, c[0], c[1])
		}
	}
	want := amqp.Table{
		"traceparent": e1.Headers["traceparent"], "x-custom": "yes",
		outboxamqp.HeaderEventType: "order.created", outboxamqp.HeaderEventVersion: int32(2),
		outboxamqp.HeaderTenantID: "acme", outboxamqp.HeaderAggregateType: "order",
		outboxamqp.HeaderAggregateID: "42", outboxamqp.HeaderPartitionKey: "order:42",
	}
	if fmt.Sprint(m.Headers) != fmt.Sprint(want) {
		t.Errorf("headers %v\nwant %v", m.Headers, want)
	}
	env, err := outbox.DecodeEnvelope(m.Body)
	must(t, err)
	if env.ID != "ev-1" || env.Source != "shop-api" || env.TenantID != "acme" || env.Version != 2 ||
		string(env.Payload) != string(e1.Payload) || env.Headers["x-custom"] != "yes" {
		t.Errorf("body decodes to %+v", env)
	}
	if got[1].MessageId != "ev-2" || got[1].Type != "order.paid" {
		t.Errorf("second message %s (%s)", got[1].MessageId, got[1].Type)
	}
	if e1.Source != "" {
		t.Errorf("the caller's envelope was modified: source %q", e1.Source)
	}
}

// A message no queue takes is returned by the broker (mandatory): its event
// fails with ErrUnroutable, an ordinary error, and the others of the batch
// are delivered.
func TestUnroutableEventsAreReported(t *testing.T) {
	q := queue(t, "unroutable", nil)
	ex := exchange(t, "unbound", "direct") // no queue bound
	pub := newPublisher(t, dial(t), outboxamqp.WithRouting(func(e *outbox.Envelope) (string, string) {
		if e.Type == "via-exchange" {
			return ex, "nowhere"
		}
		return "", e.Topic
	}))
	batch := []*outbox.Envelope{
		envelope("ok-1", "t", q),
		envelope("lost-1", "t", q+"-missing"),
		envelope("ok-2", "t", q),
		envelope("lost-2", "via-exchange", q),
		envelope("ok-3", "t", q),
	}
	errs := pub.PublishBatch(t.Context(), batch)
	for i, err := range errs {
		lost := strings.HasPrefix(batch[i].ID, "lost")
		switch {
		case !lost && err != nil:
			t.Errorf("%s: %v", batch[i].ID, err)
		case lost && !errors.Is(err, outboxamqp.ErrUnroutable):
			t.Errorf("%s: %v, want ErrUnroutable", batch[i].ID, err)
		case lost && (outbox.IsPermanent(err) || outbox.IsUnavailable(err)):
			t.Errorf("%s: %v is permanent or unavailable; want an ordinary error", batch[i].ID, err)
		}
	}
	if err := errs[1]; err != nil && !strings.Contains(err.Error(), "NO_ROUTE") {
		t.Errorf("the error does not give the broker's reply: %v", err)
	}
	if n := depth(t, q); n != 3 {
		t.Errorf("%d messages in the queue, want 3", n)
	}
}

// Publishing to an exchange that does not exist makes the broker close the
// channel: the events of that exchange fail with ErrRefused, and every other
// event of the batch, before and after them, is still delivered.
func TestMissingExchangeFailsOnlyItsEvents(t *testing.T) {
	q := queue(t, "noexchange", nil)
	missing := q + "-no-such-exchange"
	pub := newPublisher(t, dial(t), outboxamqp.WithRouting(func(e *outbox.Envelope) (string, string) {
		if e.Type == "bad" {
			return missing, "k"
		}
		return "", q
	}))
	var batch []*outbox.Envelope
	for i := range 12 {
		typ := "good"
		if i == 3 || i == 8 {
			typ = "bad"
		}
		batch = append(batch, envelope(fmt.Sprintf("%s-%02d", typ, i), typ, q))
	}
	errs := pub.PublishBatch(t.Context(), batch)
	for i, err := range errs {
		if batch[i].Type == "good" {
			if err != nil {
				t.Errorf("%s: %v", batch[i].ID, err)
			}
			continue
		}
		var ae *amqp.Error
		if !errors.Is(err, outboxamqp.ErrRefused) || !errors.As(err, &ae) || ae.Code != amqp.NotFound {
			t.Errorf("%s: %v, want ErrRefused wrapping a 404", batch[i].ID, err)
		}
		if outbox.IsPermanent(err) || outbox.IsUnavailable(err) {
			t.Errorf("%s: %v is permanent or unavailable; want an ordinary error", batch[i].ID, err)
		}
	}
	seen := map[string]int{}
	for _, m := range messages(t, q) {
		seen[m.MessageId]++
	}
	for _, e := range batch {
		if e.Type == "good" && seen[e.ID] == 0 {
			t.Errorf("%s is not in the queue", e.ID)
		}
	}
	// The publisher goes on with a fresh channel.
	must(t, pub.Publish(t.Context(), envelope("after", "good", q)))
}

// A channel exception that names no exchange (here an invalid per-message
// expiration) cannot be blamed on one message of the batch: the rest are
// published one at a time, so that only the culprit fails.
func TestUnattributableRefusalIsIsolated(t *testing.T) {
	q := queue(t, "isolate", nil)
	pub := newPublisher(t, dial(t), outboxamqp.WithMessage(func(e *outbox.Envelope, m *amqp.Publishing) {
		if e.Type == "bad" {
			m.Expiration = "-5"
		}
	}))
	var batch []*outbox.Envelope
	for i := range 6 {
		typ := "good"
		if i == 2 {
			typ = "bad"
		}
		batch = append(batch, envelope(fmt.Sprintf("%s-%d", typ, i), typ, q))
	}
	errs := pub.PublishBatch(t.Context(), batch)
	for i, err := range errs {
		switch {
		case batch[i].Type == "good" && err != nil:
			t.Errorf("%s: %v", batch[i].ID, err)
		case batch[i].Type == "bad" && !errors.Is(err, outboxamqp.ErrRefused):
			t.Errorf("%s: %v, want ErrRefused", batch[i].ID, err)
		}
	}
	seen := map[string]bool{}
	for _, m := range messages(t, q) {
		seen[m.MessageId] = true
	}
	for _, e := range batch {
		if e.Type == "good" && !seen[e.ID] {
			t.Errorf("%s is not in the queue", e.ID)
		}
	}
}

// A message the broker nacks (a full queue that rejects publishes) fails
// with ErrNacked, marked outbox.Unavailable: it is not the event's fault.
func TestNackedEventsAreUnavailable(t *testing.T) {
	q := queue(t, "full", amqp.Table{"x-max-length": int32(2), "x-overflow": "reject-publish"})
	pub := newPublisher(t, dial(t))
	var batch []*outbox.Envelope
	for i := range 5 {
		batch = append(batch, envelope(fmt.Sprint("ev-", i), "t", q))
	}
	errs := pub.PublishBatch(t.Context(), batch)
	var ok, nacked int
	for i, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, outboxamqp.ErrNacked) && outbox.IsUnavailable(err):
			nacked++
		default:
			t.Errorf("%s: %v", batch[i].ID, err)
		}
	}
	if ok != 2 || nacked != 3 {
		t.Errorf("%d confirmed and %d nacked, want 2 and 3", ok, nacked)
	}
	// The channel is still good.
	if err := pub.Publish(t.Context(), envelope("later", "t", q)); !errors.Is(err, outboxamqp.ErrNacked) {
		t.Errorf("publish to the full queue: %v, want ErrNacked", err)
	}
}

// A closed connection makes every publish outbox.Unavailable; WithDial opens
// a new one.
func TestClosedConnection(t *testing.T) {
	q := queue(t, "closed", nil)
	t.Run("without WithDial", func(t *testing.T) {
		conn := dial(t)
		pub := newPublisher(t, conn)
		must(t, pub.Publish(t.Context(), envelope("a", "t", q)))
		must(t, conn.Close())
		for _, err := range pub.PublishBatch(t.Context(), []*outbox.Envelope{envelope("b", "t", q), envelope("c", "t", q)}) {
			if !outbox.IsUnavailable(err) || !errors.Is(err, outboxamqp.ErrConnectionClosed) {
				t.Errorf("after the connection closed: %v, want Unavailable ErrConnectionClosed", err)
			}
		}
	})
	t.Run("with WithDial", func(t *testing.T) {
		conn := dial(t)
		dials := 0
		pub := newPublisher(t, conn, outboxamqp.WithDial(func(ctx context.Context) (*amqp.Connection, error) {
			dials++
			return outboxamqp.Dialer(brokerURL(t), amqp.Config{})(ctx)
		}))
		must(t, pub.Publish(t.Context(), envelope("d", "t", q)))
		must(t, conn.Close())
		must(t, pub.Publish(t.Context(), envelope("e", "t", q)))
		if dials != 1 {
			t.Errorf("%d dials, want 1", dials)
		}
		must(t, pub.Close())
		if err := pub.Publish(t.Context(), envelope("f", "t", q)); !errors.Is(err, outboxamqp.ErrClosed) || !outbox.IsUnavailable(err) {
			t.Errorf("after Close: %v, want Unavailable ErrClosed", err)
		}
	})
	ids := []string{}
	for _, m := range messages(t, q) {
		ids = append(ids, m.MessageId)
	}
	if want := []string{"a", "d", "e"}; !slices.Equal(ids, want) {
		t.Errorf("queue holds %v, want %v", ids, want)
	}
}

// A broker that does not confirm in time: the events fail with
// ErrConfirmTimeout, marked outbox.Unavailable.
func TestConfirmTimeoutIsUnavailable(t *testing.T) {
	q := queue(t, "stall", nil)
	proxy := newStallProxy(t, brokerAddr(t))
	u, err := amqp.ParseURI(brokerURL(t))
	must(t, err)
	conn := dialURL(t, fmt.Sprintf("amqp://%s:%s@%s/%s", u.Username, u.Password, proxy.addr(), u.Vhost))
	pub := newPublisher(t, conn, outboxamqp.WithConfirmTimeout(300*time.Millisecond))
	must(t, pub.Publish(t.Context(), envelope("before", "t", q)))
	proxy.stall()
	began := time.Now()
	for _, err := range pub.PublishBatch(t.Context(), []*outbox.Envelope{envelope("x", "t", q), envelope("y", "t", q)}) {
		if !errors.Is(err, outboxamqp.ErrConfirmTimeout) || !outbox.IsUnavailable(err) {
			t.Errorf("stalled broker: %v, want Unavailable ErrConfirmTimeout", err)
		}
	}
	if d := time.Since(began); d > 10*time.Second {
		t.Errorf("the publish took %v with a 300ms confirm timeout", d)
	}
	// The relay's deadline bounds the wait too, opening a channel included
	// (amqp091 has no context there; a hung broker would hold it until the
	// heartbeat gives up, 15s or more).
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	long := newPublisher(t, conn, outboxamqp.WithConfirmTimeout(0))
	began = time.Now()
	if err := long.Publish(ctx, envelope("z", "t", q)); !outbox.IsUnavailable(err) {
		t.Errorf("stalled broker past the deadline: %v, want Unavailable", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("the publish took %v with a 200ms deadline", d)
	}
	proxy.resume()
}

// The connection lost while the Publisher waits for confirms: the events
// fail at once with ErrConnectionClosed, marked outbox.Unavailable (they
// may have reached the broker: the relay publishes them again).
func TestConnectionLostAwaitingConfirms(t *testing.T) {
	q := queue(t, "lost", nil)
	proxy := newStallProxy(t, brokerAddr(t))
	u, err := amqp.ParseURI(brokerURL(t))
	must(t, err)
	conn := dialURL(t, fmt.Sprintf("amqp://%s:%s@%s/%s", u.Username, u.Password, proxy.addr(), u.Vhost))
	pub := newPublisher(t, conn, outboxamqp.WithConfirmTimeout(time.Minute))
	must(t, pub.Publish(t.Context(), envelope("before", "t", q)))
	proxy.stall()
	done := make(chan []error, 1)
	go func() {
		done <- pub.PublishBatch(context.Background(), []*outbox.Envelope{envelope("x", "t", q), envelope("y", "t", q)})
	}()
	time.Sleep(200 * time.Millisecond) // published, waiting for confirms
	proxy.cut()
	select {
	case errs := <-done:
		for _, err := range errs {
			if !errors.Is(err, outboxamqp.ErrConnectionClosed) || !outbox.IsUnavailable(err) {
				t.Errorf("connection lost: %v, want Unavailable ErrConnectionClosed", err)
			}
		}
	case <-time.After(30 * time.Second):
		t.Fatal("PublishBatch still waits 30s after the connection was lost")
	}
}

// Events that can never become AMQP messages fail permanently, before the
// broker is asked (here there is none).
func TestInvalidEventsArePermanent(t *testing.T) {
	noBroker := func(context.Context) (*amqp.Connection, error) { return nil, errors.New("no broker here") }
	pub := newPublisher(t, nil, outboxamqp.WithDial(noBroker), outboxamqp.WithRouting(func(e *outbox.Envelope) (string, string) {
		return "", e.Topic
	}))
	long := strings.Repeat("k", 256)
	withHeader := envelope("h", "t", "q")
	withHeader.Headers = map[string]string{long: "v"}
	batch := []*outbox.Envelope{nil, envelope("", "t", "q"), envelope("k", "t", long), withHeader, envelope("fine", "t", "q")}
	errs := pub.PublishBatch(t.Context(), batch)
	for i, err := range errs[:4] {
		if !errors.Is(err, outboxamqp.ErrInvalidMessage) || !outbox.IsPermanent(err) {
			t.Errorf("event %d: %v, want a permanent ErrInvalidMessage", i, err)
		}
	}
	if err := errs[4]; !outbox.IsUnavailable(err) || !strings.Contains(err.Error(), "no broker here") {
		t.Errorf("valid event without a broker: %v, want Unavailable with the dial error", err)
	}
}

func TestNewPublisherRefusesBadOptions(t *testing.T) {
	for name, opts := range map[string][]outboxamqp.Option{
		"nil connection":   nil,
		"nil routing":      {outboxamqp.WithDial(outboxamqp.Dialer("amqp://x", amqp.Config{})), outboxamqp.WithRouting(nil)},
		"negative timeout": {outboxamqp.WithDial(outboxamqp.Dialer("amqp://x", amqp.Config{})), outboxamqp.WithConfirmTimeout(-time.Second)},
		"nil dial":         {outboxamqp.WithDial(nil)},
		"empty source":     {outboxamqp.WithDial(outboxamqp.Dialer("amqp://x", amqp.Config{})), outboxamqp.WithSource("")},
		"nil option":       {outboxamqp.WithDial(outboxamqp.Dialer("amqp://x", amqp.Config{})), nil},
	} {
		p, err := outboxamqp.NewPublisher(nil, opts...)
		if !errors.Is(err, outboxamqp.ErrInvalidOption) {
			t.Errorf("%s: NewPublisher error %v, want ErrInvalidOption", name, err)
			continue
		}
		if v := p.Validate(); v == nil || v.Error() != err.Error() {
			t.Errorf("%s: Validate %v, want %v", name, v, err)
		}
		if err := p.Publish(t.Context(), envelope("a", "t", "q")); !errors.Is(err, outboxamqp.ErrInvalidOption) {
			t.Errorf("%s: Publish %v, want ErrInvalidOption", name, err)
		}
	}
}

// Batches published at once each get their own channel and confirms.
func TestConcurrentBatches(t *testing.T) {
	const workers, batches, size = 6, 5, 40
	q := queue(t, "concurrent", nil)
	pub := newPublisher(t, dial(t))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for b := range batches {
				es := make([]*outbox.Envelope, size)
				for i := range es {
					es[i] = envelope(fmt.Sprintf("w%d-b%d-%d", w, b, i), "t", q)
				}
				for i, err := range pub.PublishBatch(context.Background(), es) {
					if err != nil {
						t.Errorf("%s: %v", es[i].ID, err)
					}
				}
			}
		})
	}
	wg.Wait()
	if n := depth(t, q); n != workers*batches*size {
		t.Errorf("%d messages, want %d", n, workers*batches*size)
	}
}

func TestDescribe(t *testing.T) {
	conn := dial(t)
	for _, c := range []struct {
		opts []outboxamqp.Option
		want string
	}{
		{nil, "amqp default exchange, queue = the event's Topic (or Type) on " + brokerAddr(t)},
		{[]outboxamqp.Option{outboxamqp.WithExchange("events")}, `amqp exchange "events", routing key = the event's Topic (or Type) on ` + brokerAddr(t)},
		{[]outboxamqp.Option{outboxamqp.WithRouting(func(*outbox.Envelope) (string, string) { return "", "" })}, "amqp exchange and routing key chosen by WithRouting on " + brokerAddr(t)},
	} {
		if got := newPublisher(t, conn, c.opts...).Describe(); got != c.want {
			t.Errorf("Describe() = %q, want %q", got, c.want)
		}
	}
}
