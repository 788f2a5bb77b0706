package outboxnats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// TestPublishBatchMessages publishes a batch and reads each message back:
// its subject, Nats-Msg-Id, headers and CloudEvents body.
func TestPublishBatchMessages(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	p := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."), outboxnats.WithSource("shop"))
	es := make([]*outbox.Envelope, 20)
	for i := range es {
		es[i] = envelope(eventID(i), "orders")
		es[i].PartitionKey = "order:7"
		es[i].Headers = map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
			"x-tenant": "acme", "Nats-Expected-Stream": "elsewhere", "bad\nname": "v", "x-evil": "a\r\nNats-Msg-Id: x"}
	}
	for i, err := range p.PublishBatch(context.Background(), es) {
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
	if n := streamMsgs(t, js, stream); n != uint64(len(es)) {
		t.Fatalf("stream holds %d messages, want %d", n, len(es))
	}
	s, err := js.Stream(context.Background(), stream)
	must(t, err)
	for i, e := range es {
		m, err := s.GetMsg(context.Background(), uint64(i+1))
		must(t, err)
		if m.Subject != stream+".orders" {
			t.Errorf("subject %q, want %q", m.Subject, stream+".orders")
		}
		h := m.Header
		for k, want := range map[string]string{
			jetstream.MsgIDHeader:         e.ID,
			outboxnats.HeaderContentType:  outboxnats.ContentType,
			outboxnats.HeaderEventType:    "test.event",
			outboxnats.HeaderPartitionKey: "order:7",
			"traceparent":                 e.Headers["traceparent"],
			"x-tenant":                    "acme",
			"Nats-Expected-Stream":        "",
			"x-evil":                      "",
		} {
			if got := h.Get(k); got != want {
				t.Errorf("message %d header %s = %q, want %q", i, k, got, want)
			}
		}
		got, err := outbox.DecodeEnvelope(m.Data)
		must(t, err)
		if got.ID != e.ID || got.Source != "shop" || string(got.Payload) != `{"n":1}` || got.Headers["x-evil"] != e.Headers["x-evil"] {
			t.Errorf("decoded %+v from %s", got, m.Data)
		}
	}
	if es[0].Source != "" {
		t.Error("PublishBatch changed the caller's envelope")
	}
}

// TestPublishDuplicateWindow publishes the same events twice: JetStream's
// duplicate window drops the second copies, and the Publisher counts them
// as published.
func TestPublishDuplicateWindow(t *testing.T) {
	var dups, stored countingAcks
	js := newJS(t, jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, _ *nats.Msg, ack *jetstream.PubAck) {
		if ack.Duplicate {
			dups.n.Add(1)
		} else {
			stored.n.Add(1)
		}
	}))
	stream := newStream(t, js)
	p := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."))
	es := []*outbox.Envelope{envelope("ev-a", "x"), envelope("ev-b", "x"), envelope("ev-c", "y")}
	for round := range 2 {
		for i, err := range p.PublishBatch(context.Background(), es) {
			if err != nil {
				t.Fatalf("round %d event %d: %v", round, i, err)
			}
		}
	}
	if n := streamMsgs(t, js, stream); n != 3 {
		t.Errorf("stream holds %d messages, want 3", n)
	}
	waitFor(t, 5*time.Second, "the ack handler", func() bool { return dups.n.Load()+stored.n.Load() == 6 })
	if dups.n.Load() != 3 {
		t.Errorf("%d duplicates reported, want 3", dups.n.Load())
	}
}

// TestSubjects checks the subject mapping and its validation.
func TestSubjects(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	ctx := context.Background()
	p := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."), outboxnats.WithDefaultSubject("misc"))
	for topic, want := range map[string]string{"orders": stream + ".orders", "": stream + ".misc", "a.b": stream + ".a.b"} {
		if got, err := p.Subject(envelope("x", topic)); err != nil || got != want {
			t.Errorf("Subject(Topic %q) = %q, %v; want %q", topic, got, err, want)
		}
	}
	for _, topic := range []string{"a..b", "a.*", "a.>", "a b", ".a", "a."} {
		err := p.Publish(ctx, envelope("bad-"+topic, topic))
		if !errors.Is(err, outboxnats.ErrInvalidSubject) || !outbox.IsPermanent(err) {
			t.Errorf("Topic %q: %v, want a permanent ErrInvalidSubject", topic, err)
		}
	}
	fn := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."),
		outboxnats.WithSubjectFunc(func(e *outbox.Envelope) string { return "by-type." + e.Type }))
	must(t, fn.Publish(ctx, envelope("ev-fn", "ignored")))
	s, err := js.Stream(ctx, stream)
	must(t, err)
	m, err := s.GetLastMsgForSubject(ctx, stream+".by-type.test.event")
	must(t, err)
	if m.Header.Get(jetstream.MsgIDHeader) != "ev-fn" {
		t.Errorf("message on the function's subject has id %q", m.Header.Get(jetstream.MsgIDHeader))
	}
	if err := p.Publish(ctx, &outbox.Envelope{Type: "no.id"}); !errors.Is(err, outboxnats.ErrInvalidMessage) || !outbox.IsPermanent(err) {
		t.Errorf("event without id: %v, want a permanent ErrInvalidMessage", err)
	}
}

// TestPublishNoStream publishes to a subject no stream captures: the error
// says so, and is neither permanent nor unavailable (retried, then dead).
func TestPublishNoStream(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	p := newPublisher(t, js)
	errs := p.PublishBatch(context.Background(), []*outbox.Envelope{envelope("ev-1", testenv.Name("nowhere")), envelope("ev-2", stream+".ok")})
	err := errs[0]
	if !errors.Is(err, outboxnats.ErrNoStream) || outbox.IsPermanent(err) || outbox.IsUnavailable(err) {
		t.Errorf("no stream: %v, want ErrNoStream, neither permanent nor unavailable", err)
	}
	if err != nil && !strings.Contains(err.Error(), "ev-1") {
		t.Errorf("the error does not name the event: %v", err)
	}
	if errs[1] != nil {
		t.Errorf("the event of a captured subject: %v", errs[1])
	}
}

// TestPublishFullStream fills a stream that discards new messages: the
// server's 503 is an outage, so the relay spends no attempt.
func TestPublishFullStream(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js, func(c *jetstream.StreamConfig) { c.MaxMsgs, c.Discard = 2, jetstream.DiscardNew })
	p := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."))
	errs := p.PublishBatch(context.Background(), []*outbox.Envelope{envelope("a", "x"), envelope("b", "x"), envelope("c", "x")})
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("the first two: %v, %v", errs[0], errs[1])
	}
	if !outbox.IsUnavailable(errs[2]) {
		t.Errorf("a full stream: %v, want outbox.Unavailable", errs[2])
	}
}

// TestPublishTooLarge publishes events larger than the stream's
// MaxMsgSize and than the server's max payload: they can never be stored.
func TestPublishTooLarge(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js, func(c *jetstream.StreamConfig) { c.MaxMsgSize = 2048 })
	p := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."))
	big := envelope("big", "x")
	big.Payload = []byte(`"` + strings.Repeat("x", 4096) + `"`)
	huge := envelope("huge", "x")
	huge.Payload = []byte(`"` + strings.Repeat("x", int(js.Conn().MaxPayload())) + `"`)
	errs := p.PublishBatch(context.Background(), []*outbox.Envelope{big, huge, envelope("small", "x")})
	for i, err := range errs[:2] {
		if !errors.Is(err, outboxnats.ErrInvalidMessage) || !outbox.IsPermanent(err) {
			t.Errorf("event %d: %v, want a permanent ErrInvalidMessage", i, err)
		}
	}
	if errs[2] != nil {
		t.Errorf("small event: %v", errs[2])
	}
}

// TestExpectStream refuses a message that another stream captures.
func TestExpectStream(t *testing.T) {
	js := newJS(t)
	stream := newStream(t, js)
	ok := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."), outboxnats.WithExpectStream(stream))
	must(t, ok.Publish(context.Background(), envelope("a", "x")))
	wrong := newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+"."), outboxnats.WithExpectStream("OTHER"))
	err := wrong.Publish(context.Background(), envelope("b", "x"))
	if err == nil || outbox.IsUnavailable(err) || outbox.IsPermanent(err) {
		t.Errorf("expected stream mismatch: %v, want an ordinary error", err)
	}
}

// TestOptions checks that bad options are refused with ErrInvalidOption.
func TestOptions(t *testing.T) {
	js := newJS(t)
	for name, opt := range map[string]outboxnats.Option{
		"nil option":        nil,
		"empty source":      outboxnats.WithSource(""),
		"wildcard prefix":   outboxnats.WithSubjectPrefix("a.*."),
		"space prefix":      outboxnats.WithSubjectPrefix("a b."),
		"bad default":       outboxnats.WithDefaultSubject("a..b"),
		"nil subject func":  outboxnats.WithSubjectFunc(nil),
		"empty expected":    outboxnats.WithExpectStream(""),
		"short ack timeout": outboxnats.WithAckTimeout(0),
		"nil logger":        outboxnats.WithLogger(nil),
	} {
		if p, err := outboxnats.NewPublisher(js, opt); !errors.Is(err, outboxnats.ErrInvalidOption) || p != nil {
			t.Errorf("%s: %v, %v; want ErrInvalidOption and no Publisher", name, p, err)
		}
	}
	if _, err := outboxnats.NewPublisher(nil); !errors.Is(err, outboxnats.ErrInvalidOption) {
		t.Errorf("nil JetStream: %v", err)
	}
	var zero outboxnats.Publisher
	if err := zero.Validate(); !errors.Is(err, outboxnats.ErrInvalidOption) {
		t.Errorf("zero Publisher: Validate() = %v", err)
	}
	if _, err := relay.New(testenv.Open(t, testenv.SQLite), &zero); !errors.Is(err, outboxnats.ErrInvalidOption) {
		t.Errorf("relay.New with a zero Publisher: %v", err)
	}
}

// TestDescribe says where the Publisher publishes.
func TestDescribe(t *testing.T) {
	js := newJS(t)
	d := newPublisher(t, js, outboxnats.WithSubjectPrefix("shop."), outboxnats.WithExpectStream("SHOP")).Describe()
	for _, want := range []string{"nats jetstream", "shop.<Topic>", "shop.outbox", "stream SHOP", js.Conn().ConnectedUrlRedacted()} {
		if !strings.Contains(d, want) {
			t.Errorf("Describe() = %q, lacks %q", d, want)
		}
	}
}

type countingAcks struct{ n atomicInt }
