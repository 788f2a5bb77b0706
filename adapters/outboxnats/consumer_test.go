package outboxnats_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// seen records what handlers were given.
type seen struct {
	mu         sync.Mutex
	deliveries []consume.Delivery
	envelopes  []*outbox.Envelope
	dead       []consume.DeadLetter
}

func (s *seen) add(ctx context.Context, e *outbox.Envelope) int {
	d, _ := consume.DeliveryFrom(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries = append(s.deliveries, d)
	s.envelopes = append(s.envelopes, e)
	return len(s.deliveries)
}

func (s *seen) onDead() consume.Option {
	return consume.WithOnDead(func(_ context.Context, d consume.DeadLetter) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.dead = append(s.dead, d)
	})
}

func (s *seen) runs() int  { s.mu.Lock(); defer s.mu.Unlock(); return len(s.deliveries) }
func (s *seen) deads() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.dead) }

// at returns the i-th run's Delivery and its JetStream details.
func (s *seen) at(i int) (consume.Delivery, outboxnats.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, _ := s.deliveries[i].Details.(outboxnats.Message)
	return s.deliveries[i], m
}

// publishAll publishes es with a Publisher onto the stream's subjects.
func publishAll(t testing.TB, js jetstream.JetStream, stream string, es ...*outbox.Envelope) {
	t.Helper()
	p := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."))
	for i, err := range p.PublishBatch(context.Background(), es) {
		if err != nil {
			t.Fatalf("publishing event %d: %v", i, err)
		}
	}
}

// consumerInfo returns the durable consumer's state.
func consumerInfo(t testing.TB, js jetstream.JetStream, stream, durable string) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := js.Consumer(context.Background(), stream, durable)
	must(t, err)
	info, err := c.Info(context.Background())
	must(t, err)
	return info
}

// settled reports whether the durable consumer has nothing pending or
// unacknowledged.
func settled(t testing.TB, js jetstream.JetStream, stream, durable string) func() bool {
	return func() bool {
		info := consumerInfo(t, js, stream, durable)
		return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
	}
}

// TestConsumerAcks handles the events its filter subject takes, once
// each, and gives handlers JetStream's details of each delivery.
func TestConsumerAcks(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	var s seen
	c, err := outboxnats.NewConsumer(js, stream, "acks", consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		s.add(ctx, e)
		return nil
	}), consumerOpts(t, outboxnats.WithFilterSubject(stream+".orders"))...)
	must(t, err)
	publishAll(t, js, stream, envelope("ev-1", "orders"), envelope("ev-2", "other"), envelope("ev-3", "orders"))
	run(t, c)
	waitFor(t, 20*time.Second, "two events handled", func() bool { return s.runs() >= 2 })
	waitFor(t, 20*time.Second, "the consumer to settle", settled(t, js, stream, "acks"))
	time.Sleep(200 * time.Millisecond) // nothing more arrives
	if s.runs() != 2 {
		t.Fatalf("%d handler runs, want 2 (the filter leaves ev-2 out)", s.runs())
	}
	for i, want := range []string{"ev-1", "ev-3"} {
		d, m := s.at(i)
		if s.envelopes[i].ID != want || d.System != "nats" || d.Destination != stream || d.Attempt != 1 ||
			d.MaxAttempts != consume.DefaultMaxDeliveries || m.Stream != stream || m.Consumer != "acks" ||
			m.Subject != stream+".orders" || m.NumDelivered != 1 || m.Header.Get(jetstream.MsgIDHeader) != want ||
			m.StreamSeq != uint64(2*i+1) || m.Timestamp.IsZero() || len(m.Data) == 0 {
			t.Errorf("run %d: event %s, delivery %+v, details %+v", i, s.envelopes[i].ID, d, m)
		}
	}
}

// TestConsumerDead: a message that is dead (outbox.Permanent, its last
// counted attempt failed, not an outbox event) is published to the
// dead-letter subject with the Outbox-Dead-… headers, and terminated.
func TestConsumerDead(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	dlq := newStream(t, js) // captures "<dlq>.>"
	var s seen
	h := consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		s.add(ctx, e)
		if e.ID == "permanent" {
			return outbox.Permanent(errors.New("cannot ever work"))
		}
		return errors.New("fails every time")
	})
	c, err := outboxnats.NewConsumer(js, stream, "dead", h, consumerOpts(t,
		consume.WithMaxDeliveries(3), outboxnats.WithDeadLetterSubject(dlq+".dead"), s.onDead())...)
	must(t, err)
	publishAll(t, js, stream, envelope("permanent", "x"), envelope("flaky", "x"))
	must(t, js.Conn().Publish(stream+".x", []byte("not an envelope")))
	run(t, c)
	waitFor(t, 30*time.Second, "three dead messages", func() bool { return s.deads() >= 3 })
	waitFor(t, 20*time.Second, "the consumer to settle", func() bool {
		info := consumerInfo(t, js, stream, "dead")
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	s.mu.Lock()
	for _, d := range s.dead {
		if m, ok := d.Delivery.Details.(outboxnats.Message); !ok || m.Stream != stream {
			t.Errorf("dead letter's details %+v", d.Delivery.Details)
		}
	}
	s.mu.Unlock()
	if n := streamMsgs(t, js, dlq); n != 3 {
		t.Fatalf("dead-letter stream holds %d messages, want 3", n)
	}
	ds, err := js.Stream(context.Background(), dlq)
	must(t, err)
	for seq := uint64(1); seq <= 3; seq++ {
		m, err := ds.GetMsg(context.Background(), seq)
		must(t, err)
		h := m.Header
		if h.Get(outboxnats.HeaderDeadReason) == "" || h.Get(outboxnats.HeaderDeadStream) != stream ||
			h.Get(outboxnats.HeaderDeadConsumer) != "dead" || h.Get(outboxnats.HeaderDeadSubject) != stream+".x" ||
			h.Get(outboxnats.HeaderDeadSequence) == "" || h.Get(outboxnats.HeaderDeadDeliveries) == "" {
			t.Errorf("dead letter %d: headers %v", seq, h)
		}
		if id := h.Get(outboxnats.HeaderEventType); id == "" && string(m.Data) != "not an envelope" {
			t.Errorf("dead letter %d lost its headers or data: %v %q", seq, h, m.Data)
		}
	}
}

// TestConsumerUnavailableDoesNotCount has a handler report its dependency
// unavailable twice and the event in progress once, then fail: those runs
// are excused (the server counts every delivery; the consumer subtracts
// the ones it handed back uncounted), so the message gets its two counted
// attempts.
func TestConsumerUnavailableDoesNotCount(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	var s seen
	c, err := outboxnats.NewConsumer(js, stream, "unavail", consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		switch s.add(ctx, e) {
		case 1, 2:
			return outbox.Unavailable(errors.New("smtp down"))
		case 3:
			return idempotency.ErrInProgress
		}
		return errors.New("still failing")
	}), consumerOpts(t, consume.WithMaxDeliveries(2), s.onDead())...)
	must(t, err)
	publishAll(t, js, stream, envelope("ev-1", "x"))
	run(t, c)
	waitFor(t, 30*time.Second, "the message to go dead", func() bool { return s.deads() == 1 })
	if s.runs() != 5 {
		t.Fatalf("%d runs, want 5 (2 unavailable, 1 in progress, 2 counted)", s.runs())
	}
	var last uint64
	for i, want := range []int{1, 1, 1, 1, 2} {
		d, m := s.at(i)
		if d.Attempt != want || m.NumDelivered <= last {
			t.Errorf("run %d: attempt %d (want %d), delivered %d (after %d)", i, d.Attempt, want, m.NumDelivered, last)
		}
		last = m.NumDelivered
	}
	if !errors.Is(s.dead[0].Reason, consume.ErrTooManyDeliveries) {
		t.Errorf("dead reason %v", s.dead[0].Reason)
	}
}

// TestConsumerRecreated deletes the durable consumer under Run: Run
// creates it again (with WithConsumerConfig's settings) and goes on.
func TestConsumerRecreated(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	var s seen
	c, err := outboxnats.NewConsumer(js, stream, "phoenix", consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		s.add(ctx, e)
		return nil
	}), consumerOpts(t, outboxnats.WithConsumerConfig(func(cfg *jetstream.ConsumerConfig) {
		cfg.DeliverPolicy = jetstream.DeliverNewPolicy // after the re-creation, only what comes next
		cfg.Description = "test consumer"
	}))...)
	must(t, err)
	run(t, c)
	waitFor(t, 20*time.Second, "the durable consumer", func() bool {
		_, err := js.Consumer(context.Background(), stream, "phoenix")
		return err == nil
	})
	if d := consumerInfo(t, js, stream, "phoenix").Config.Description; d != "test consumer" {
		t.Errorf("WithConsumerConfig not applied: description %q", d)
	}
	publishAll(t, js, stream, envelope("ev-1", "x"))
	waitFor(t, 20*time.Second, "the first event", func() bool { return s.runs() == 1 })
	must(t, js.DeleteConsumer(context.Background(), stream, "phoenix"))
	waitFor(t, 20*time.Second, "the durable consumer to be created again", func() bool {
		_, err := js.Consumer(context.Background(), stream, "phoenix")
		return err == nil
	})
	publishAll(t, js, stream, envelope("ev-2", "x"))
	waitFor(t, 20*time.Second, "the second event", func() bool { return s.runs() == 2 })
}

// TestConsumerOptions checks that bad arguments and options are refused,
// and that the ack wait is the default handler timeout.
func TestConsumerOptions(t *testing.T) {
	js := newJS(t)
	h := consume.HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil })
	for name, c := range map[string]struct {
		js       jetstream.JetStream
		stream   string
		durable  string
		h        consume.Handler
		opt      consume.Option
		noOption bool
	}{
		"nil js":          {nil, "S", "d", h, consume.Option{}, true},
		"nil handler":     {js, "S", "d", nil, consume.Option{}, true},
		"dotted stream":   {js, "a.b", "d", h, consume.Option{}, true},
		"empty durable":   {js, "S", "", h, consume.Option{}, true},
		"batch 0":         {js, "S", "d", h, outboxnats.WithBatch(0), false},
		"ack wait":        {js, "S", "d", h, outboxnats.WithAckWait(time.Millisecond), false},
		"dead subject":    {js, "S", "d", h, outboxnats.WithDeadLetterSubject("a.>"), false},
		"fetch wait":      {js, "S", "d", h, outboxnats.WithFetchWait(time.Hour), false},
		"empty filter":    {js, "S", "d", h, outboxnats.WithFilterSubject(""), false},
		"nil config func": {js, "S", "d", h, outboxnats.WithConsumerConfig(nil), false},
		"zero option":     {js, "S", "d", h, consume.Option{}, false},
	} {
		var opts []consume.Option
		if !c.noOption {
			opts = append(opts, c.opt)
		}
		if cons, err := outboxnats.NewConsumer(c.js, c.stream, c.durable, c.h, opts...); !errors.Is(err, consume.ErrInvalidOption) || cons != nil {
			t.Errorf("%s: %v, %v; want ErrInvalidOption and no consumer", name, cons, err)
		}
	}
	stream := newStream(t, js)
	deadline := make(chan time.Duration, 1)
	c, err := outboxnats.NewConsumer(js, stream, "d", consume.HandlerFunc(func(ctx context.Context, _ *outbox.Envelope) error {
		d, _ := ctx.Deadline()
		deadline <- time.Until(d)
		return nil
	}), consumerOpts(t, outboxnats.WithAckWait(7*time.Second))...)
	must(t, err)
	run(t, c)
	publishAll(t, js, stream, envelope("ev-1", "x"))
	if d := <-deadline; d < 6*time.Second || d > 7*time.Second {
		t.Errorf("handler timeout %v, want the ack wait (7s)", d)
	}
}

// TestBeyondDuplicateWindow publishes an event again after the stream's
// duplicate window: JetStream stores it twice, as the package documentation
// says, and consume.IdempotentTx still makes its effect happen once.
func TestBeyondDuplicateWindow(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js, func(c *jetstream.StreamConfig) { c.Duplicates = 500 * time.Millisecond })
	db, store := setupDB(t, testenv.Open(t, testenv.SQLite))
	must(t, db.AutoMigrate(&effect{}))
	p := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."))
	e := envelope("ev-late", "x")
	must(t, p.Publish(context.Background(), e))
	must(t, p.Publish(context.Background(), e)) // within the window: dropped
	if n := streamMsgs(t, js, stream); n != 1 {
		t.Fatalf("within the window the stream holds %d messages, want 1", n)
	}
	time.Sleep(1500 * time.Millisecond) // the server forgets ids a little after the window
	must(t, p.Publish(context.Background(), e))
	if n := streamMsgs(t, js, stream); n != 2 {
		t.Fatalf("after the window the stream holds %d messages, want 2", n)
	}
	var deliveries counters
	effectOnce := consume.IdempotentTx(store, "late", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		return tx.Create(&effect{EventID: e.ID}).Error
	})
	c, err := outboxnats.NewConsumer(js, stream, "late", consume.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		deliveries.inc(e.ID)
		return effectOnce.Handle(ctx, e)
	}), consumerOpts(t)...)
	must(t, err)
	run(t, c)
	waitFor(t, 20*time.Second, "both copies handled", func() bool { return deliveries.get("ev-late") == 2 })
	waitFor(t, 20*time.Second, "the consumer to settle", settled(t, js, stream, "late"))
	var n int64
	must(t, db.Model(&effect{}).Count(&n).Error)
	if n != 1 {
		t.Errorf("%d effects of an event stored twice, want 1", n)
	}
}
