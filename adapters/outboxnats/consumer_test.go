package outboxnats_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// seen records what handlers were given.
type seen struct {
	mu         sync.Mutex
	deliveries []outboxnats.Delivery
	envelopes  []*outbox.Envelope
	dead       []outboxnats.DeadMessage
}

func (s *seen) add(ctx context.Context, e *outbox.Envelope) {
	d, _ := outboxnats.DeliveryFrom(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries = append(s.deliveries, d)
	s.envelopes = append(s.envelopes, e)
}

func (s *seen) onDead(_ context.Context, d outboxnats.DeadMessage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dead = append(s.dead, d)
}

func (s *seen) runs() int  { s.mu.Lock(); defer s.mu.Unlock(); return len(s.deliveries) }
func (s *seen) deads() int { s.mu.Lock(); defer s.mu.Unlock(); return len(s.dead) }
func (s *seen) at(i int) outboxnats.Delivery {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries[i]
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

// TestConsumerAcks handles events once each, acknowledging them, and gives
// handlers the envelope and the delivery's metadata.
func TestConsumerAcks(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	var s seen
	c, err := outboxnats.NewConsumer(js, stream, "acks", outboxnats.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		if got, ok := outboxnats.EnvelopeFrom(ctx); !ok || got != e {
			t.Errorf("EnvelopeFrom: %v, %v", got, ok)
		}
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
		d := s.at(i)
		if s.envelopes[i].ID != want || d.Stream != stream || d.Consumer != "acks" || d.Subject != stream+".orders" ||
			d.NumDelivered != 1 || d.Attempt != 1 || d.MaxAttempts != outboxnats.DefaultMaxDeliveries || d.LastAttempt() ||
			d.Header.Get(jetstream.MsgIDHeader) != want || d.StreamSeq != uint64(2*i+1) || d.Timestamp.IsZero() {
			t.Errorf("run %d: event %s, delivery %+v", i, s.envelopes[i].ID, d)
		}
	}
}

// TestConsumerRetries fails a handler twice: the message is delivered
// again after a delay, with its counters up, and acknowledged at last.
func TestConsumerRetries(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	var s seen
	c, err := outboxnats.NewConsumer(js, stream, "retries", outboxnats.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		s.add(ctx, e)
		if s.runs() <= 2 {
			return errors.New("transient")
		}
		return nil
	}), consumerOpts(t)...)
	must(t, err)
	publishAll(t, js, stream, envelope("ev-1", "x"))
	run(t, c)
	waitFor(t, 20*time.Second, "three runs", func() bool { return s.runs() >= 3 })
	waitFor(t, 20*time.Second, "the consumer to settle", func() bool {
		info := consumerInfo(t, js, stream, "retries")
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	time.Sleep(300 * time.Millisecond)
	if s.runs() != 3 {
		t.Fatalf("%d runs, want 3", s.runs())
	}
	for i := range 3 {
		if d := s.at(i); d.Attempt != i+1 || d.NumDelivered != uint64(i+1) {
			t.Errorf("run %d: attempt %d, delivered %d", i, d.Attempt, d.NumDelivered)
		}
	}
	if gap := s.at(2).Timestamp; gap.IsZero() {
		t.Error("no timestamp")
	}
}

// TestConsumerDead covers the dead rule: outbox.Permanent, a failure on the
// last attempt, a malformed message and a payload of the wrong type are
// dead at once: terminated (never delivered again), published to the
// dead-letter subject and passed to OnDead.
func TestConsumerDead(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	dlq := newStream(t, js) // captures "<dlq>.>"
	var s seen
	type order struct{ ID int }
	var typed sync.Map
	h := outboxnats.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		s.add(ctx, e)
		switch e.ID {
		case "permanent":
			return outbox.Permanent(errors.New("cannot ever work"))
		case "flaky":
			return errors.New("fails every time")
		}
		return outboxnats.HandlerOf(func(ctx context.Context, o order) error {
			typed.Store(e.ID, o)
			return nil
		}).Handle(ctx, e)
	})
	c, err := outboxnats.NewConsumer(js, stream, "dead", h, consumerOpts(t,
		outboxnats.WithMaxDeliveries(3), outboxnats.WithDeadLetterSubject(dlq+".dead"), outboxnats.WithOnDead(s.onDead))...)
	must(t, err)
	good, bad := envelope("good", "x"), envelope("bad-payload", "x")
	good.Payload, bad.Payload = []byte(`{"ID":7}`), []byte(`"not an order"`)
	publishAll(t, js, stream, envelope("permanent", "x"), envelope("flaky", "x"), good, bad)
	nc := js.Conn()
	must(t, nc.Publish(stream+".x", []byte("not an envelope")))
	run(t, c)
	waitFor(t, 30*time.Second, "four dead messages", func() bool { return s.deads() >= 4 })
	waitFor(t, 20*time.Second, "the consumer to settle", func() bool {
		info := consumerInfo(t, js, stream, "dead")
		return info.NumPending == 0 && info.NumAckPending == 0
	})
	time.Sleep(300 * time.Millisecond)

	if o, ok := typed.Load("good"); !ok || o.(order).ID != 7 {
		t.Errorf("typed handler got %v, %v", o, ok)
	}
	reasons := map[string]error{}
	s.mu.Lock()
	for _, d := range s.dead {
		id := "malformed"
		if d.Envelope != nil {
			id = d.Envelope.ID
		}
		reasons[id] = d.Reason
	}
	runs := map[string]int{}
	for _, e := range s.envelopes {
		runs[e.ID]++
	}
	s.mu.Unlock()
	for id, check := range map[string]func(error) bool{
		"permanent":   outbox.IsPermanent,
		"flaky":       func(err error) bool { return errors.Is(err, outboxnats.ErrTooManyDeliveries) },
		"bad-payload": func(err error) bool { return errors.Is(err, outboxnats.ErrBadPayload) && outbox.IsPermanent(err) },
		"malformed": func(err error) bool {
			return errors.Is(err, outboxnats.ErrMalformed) && errors.Is(err, outbox.ErrInvalidEnvelope)
		},
	} {
		if !check(reasons[id]) {
			t.Errorf("%s: dead reason %v", id, reasons[id])
		}
	}
	if runs["permanent"] != 1 || runs["flaky"] != 3 || runs["bad-payload"] != 1 || runs["good"] != 1 {
		t.Errorf("handler runs %v, want permanent 1, flaky 3, bad-payload 1, good 1", runs)
	}
	if n := streamMsgs(t, js, dlq); n != 4 {
		t.Fatalf("dead-letter stream holds %d messages, want 4", n)
	}
	ds, err := js.Stream(context.Background(), dlq)
	must(t, err)
	for seq := uint64(1); seq <= 4; seq++ {
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

// TestConsumerUnavailableDoesNotCount has a handler report its transport
// unavailable twice, then fail: the unavailable runs do not count towards
// WithMaxDeliveries, so the message gets its two counted attempts.
func TestConsumerUnavailableDoesNotCount(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	var s seen
	c, err := outboxnats.NewConsumer(js, stream, "unavail", outboxnats.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		s.add(ctx, e)
		if s.runs() <= 2 {
			return outbox.Unavailable(errors.New("smtp down"))
		}
		if s.runs() == 3 {
			return idempotency.ErrInProgress
		}
		return errors.New("still failing")
	}), consumerOpts(t, outboxnats.WithMaxDeliveries(2), outboxnats.WithOnDead(s.onDead))...)
	must(t, err)
	publishAll(t, js, stream, envelope("ev-1", "x"))
	run(t, c)
	waitFor(t, 30*time.Second, "the message to go dead", func() bool { return s.deads() == 1 })
	if s.runs() != 5 {
		t.Fatalf("%d runs, want 5 (2 unavailable, 1 in progress, 2 counted)", s.runs())
	}
	// The server counts more deliveries than runs: a message handed back
	// while its fetch is still open comes back in it, and is handed back
	// again (excused) while the consumer pauses.
	var last uint64
	for i, want := range []int{1, 1, 1, 1, 2} {
		d := s.at(i)
		if d.Attempt != want || d.NumDelivered <= last {
			t.Errorf("run %d: attempt %d (want %d), delivered %d (after %d)", i, d.Attempt, want, d.NumDelivered, last)
		}
		last = d.NumDelivered
	}
	if !errors.Is(s.dead[0].Reason, outboxnats.ErrTooManyDeliveries) {
		t.Errorf("dead reason %v", s.dead[0].Reason)
	}
}

// TestConsumerIdempotent delivers one event three times (as a producer
// that published it again after the duplicate window would): the
// IdempotentTx effect happens once, and so does Idempotent's handler.
func TestConsumerIdempotent(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		js := newJS(t)
		stream := newStream(t, js)
		_, store := setupDB(t, db)
		type effect struct {
			ID      uint
			EventID string
		}
		must(t, db.AutoMigrate(&effect{}))
		var plain, txRuns counters
		tx := outboxnats.IdempotentTx(store, "effects", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
			txRuns.inc(e.ID)
			return tx.Create(&effect{EventID: e.ID}).Error
		})
		once := outboxnats.Idempotent(store, "mail", outboxnats.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
			plain.inc(e.ID)
			return nil
		}))
		var handled counters
		both := outboxnats.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
			defer handled.inc(e.ID)
			return errors.Join(tx.Handle(ctx, e), once.Handle(ctx, e))
		})
		c, err := outboxnats.NewConsumer(js, stream, "idem", both, consumerOpts(t)...)
		must(t, err)
		nc := js.Conn()
		e := envelope("ev-dup", "x")
		body, err := e.MarshalJSON()
		must(t, err)
		for i := range 3 { // three messages of one event, under distinct message ids
			m := nats.NewMsg(stream + ".x")
			m.Data = body
			m.Header.Set(jetstream.MsgIDHeader, fmt.Sprint("copy-", i))
			_, err := js.PublishMsg(context.Background(), m)
			must(t, err)
		}
		_ = nc
		run(t, c)
		waitFor(t, 20*time.Second, "three deliveries", func() bool { return handled.get("ev-dup") == 3 })
		var n int64
		must(t, db.Model(&effect{}).Where("event_id = ?", "ev-dup").Count(&n).Error)
		if n != 1 || txRuns.get("ev-dup") != 1 || plain.get("ev-dup") != 1 {
			t.Errorf("%d effects, tx handler ran %d times, plain handler %d times; want 1 of each", n, txRuns.get("ev-dup"), plain.get("ev-dup"))
		}
	})
}

// TestConsumerRecreated deletes the durable consumer under Run: Run
// creates it again and goes on.
func TestConsumerRecreated(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	var s seen
	c, err := outboxnats.NewConsumer(js, stream, "phoenix", outboxnats.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
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

// TestConsumerOptions checks that bad arguments and options are refused.
func TestConsumerOptions(t *testing.T) {
	js := newJS(t)
	h := outboxnats.HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil })
	_, store := setupDB(t, testenv.Open(t, testenv.SQLite))
	for name, mk := range map[string]func() (*outboxnats.Consumer, error){
		"nil js":      func() (*outboxnats.Consumer, error) { return outboxnats.NewConsumer(nil, "S", "d", h) },
		"nil handler": func() (*outboxnats.Consumer, error) { return outboxnats.NewConsumer(js, "S", "d", nil) },
		"nil typed": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", outboxnats.HandlerOf[int](nil))
		},
		"dotted stream": func() (*outboxnats.Consumer, error) { return outboxnats.NewConsumer(js, "a.b", "d", h) },
		"empty durable": func() (*outboxnats.Consumer, error) { return outboxnats.NewConsumer(js, "S", "", h) },
		"nil store": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", outboxnats.Idempotent(nil, "n", h))
		},
		"empty name": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", outboxnats.Idempotent(store, "", h))
		},
		"nil tx fn": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", outboxnats.IdempotentTx(store, "n", nil))
		},
		"batch 0": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", h, outboxnats.WithBatch(0))
		},
		"ack wait": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", h, outboxnats.WithAckWait(time.Millisecond))
		},
		"retry delay": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", h, outboxnats.WithRetryDelay(time.Second, time.Millisecond))
		},
		"dead subject": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", h, outboxnats.WithDeadLetterSubject("a.>"))
		},
		"max deliveries": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", h, outboxnats.WithMaxDeliveries(0))
		},
		"fetch wait": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", h, outboxnats.WithFetchWait(time.Hour))
		},
		"nil option": func() (*outboxnats.Consumer, error) { return outboxnats.NewConsumer(js, "S", "d", h, nil) },
		"nil logger": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", h, outboxnats.WithLogger(nil))
		},
		"empty filter": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", h, outboxnats.WithFilterSubject(""))
		},
		"nil config func": func() (*outboxnats.Consumer, error) {
			return outboxnats.NewConsumer(js, "S", "d", h, outboxnats.WithConsumerConfig(nil))
		},
	} {
		if c, err := mk(); !errors.Is(err, outboxnats.ErrInvalidOption) || c != nil {
			t.Errorf("%s: %v, %v; want ErrInvalidOption and no Consumer", name, c, err)
		}
	}
	stream := newStream(t, js)
	c, err := outboxnats.NewConsumer(js, stream, "d", h)
	must(t, err)
	stop := run(t, c)
	waitFor(t, 20*time.Second, "Run to create the durable consumer", func() bool {
		_, err := js.Consumer(context.Background(), stream, "d")
		return err == nil
	})
	second, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := c.Run(second); !errors.Is(err, outboxnats.ErrRunning) {
		t.Errorf("a second Run: %v, want ErrRunning", err)
	}
	stop()
}

// TestBeyondDuplicateWindow publishes an event again after the stream's
// duplicate window: JetStream stores it twice, as the package documentation
// says, and IdempotentTx still makes its effect happen once.
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
	c, err := outboxnats.NewConsumer(js, stream, "late", outboxnats.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		deliveries.inc(e.ID)
		return outboxnats.IdempotentTx(store, "late", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
			return tx.Create(&effect{EventID: e.ID}).Error
		}).Handle(ctx, e)
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
