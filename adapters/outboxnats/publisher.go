package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/optionerr"
	"github.com/gormoutbox/outbox/relay"
)

// Publisher publishes outbox events to NATS JetStream, one message per
// event. It implements relay.Publisher, relay.BatchPublisher (the relay
// hands it a whole batch, which it publishes asynchronously before it
// waits for the acknowledgements), relay.Validator and relay.Describer.
// It is safe for concurrent use.
//
// Each message
//
//   - goes to the event's subject: its Topic, or what WithSubjectFunc
//     chooses, or the default subject (WithDefaultSubject, "outbox") when
//     that is empty, after the prefix of WithSubjectPrefix;
//   - holds the envelope as CloudEvents 1.0 structured JSON
//     (outbox.DecodeEnvelope reads it back; the Consumer does it for you);
//   - carries the event id in Nats-Msg-Id, so that JetStream stores an
//     event published twice within the stream's duplicate window once,
//     and HeaderContentType, HeaderEventType, HeaderPartitionKey and the
//     event's own headers (traceparent, tracestate, …; see headerOK).
type Publisher struct {
	js  jetstream.JetStream
	cfg pubConfig
}

var (
	_ relay.BatchPublisher = (*Publisher)(nil)
	_ relay.Validator      = (*Publisher)(nil)
	_ relay.Describer      = (*Publisher)(nil)
)

// NewPublisher returns a Publisher that publishes through js. It returns
// an error wrapping ErrInvalidOption, and no Publisher, for a nil js or a
// bad option.
//
// The NATS connection under js should reconnect for ever
// (nats.MaxReconnects(-1)): a connection that gave up is closed, and
// every publish then fails as outbox.Unavailable until the process
// connects again.
func NewPublisher(js jetstream.JetStream, opts ...Option) (*Publisher, error) {
	cfg := pubConfig{
		PublisherConfig: adapterkit.NewPublisherConfig(ErrInvalidOption),
		defaultSubject:  DefaultSubject,
		ackTimeout:      DefaultAckTimeout,
	}
	if js == nil {
		cfg.Fail("nil JetStream")
	}
	optionerr.Apply(&cfg, &cfg.Errors, opts)
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	return &Publisher{js: js, cfg: cfg}, nil
}

// Validate reports whether the Publisher was made by NewPublisher (which
// checked its options); relay.New calls it.
func (p *Publisher) Validate() error {
	if p == nil || p.js == nil {
		return fmt.Errorf("%w: Publisher not made by NewPublisher", ErrInvalidOption)
	}
	return nil
}

// Subject returns the subject that e is published to, or an error wrapping
// ErrInvalidSubject, marked outbox.Permanent, when it is not a valid one.
func (p *Publisher) Subject(e *outbox.Envelope) (string, error) {
	name := e.Topic
	if p.cfg.subjectFunc != nil {
		name = p.cfg.subjectFunc(e)
	}
	if name == "" {
		name = p.cfg.defaultSubject
	}
	subject := p.cfg.prefix + name
	if err := checkSubject(subject); err != nil {
		return "", outbox.Permanent(fmt.Errorf("%w: event %s (%s): %w", ErrInvalidSubject, e.ID, e.Type, err))
	}
	return subject, nil
}

// Publish publishes e and waits for JetStream's acknowledgement; it is
// PublishBatch of one event.
func (p *Publisher) Publish(ctx context.Context, e *outbox.Envelope) error {
	return p.PublishBatch(ctx, []*outbox.Envelope{e})[0]
}

// PublishBatch publishes every event of es asynchronously (PublishMsgAsync),
// then waits for each message's acknowledgement, until the ack timeout
// (WithAckTimeout) or the end of ctx, and returns one result per event, in
// order. An event is published when JetStream stored it, or when it
// reported it a duplicate within the stream's duplicate window (an
// earlier delivery of the same event): both are nil.
//
// Errors name the event and the subject and are classified for the relay:
//
//   - outbox.Unavailable (no attempt spent): the connection is not
//     connected (reconnecting, closed, draining), the stream or JetStream
//     did not answer, no acknowledgement came in time, the client has too
//     many publishes in flight, or JetStream answered 503 (insufficient
//     resources, a stream full under DiscardNew, no cluster quorum).
//     Events after the first such failure are not sent.
//   - outbox.Permanent: the event cannot become a message (ErrInvalidMessage:
//     no id, larger than the server's max payload or the stream's max
//     message size; ErrInvalidSubject).
//   - ErrNoStream: no stream captures the subject (see the package
//     documentation); any other JetStream error (such as a WithExpectStream
//     mismatch) is returned as is, for the relay to retry with backoff.
func (p *Publisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := make([]error, len(es))
	if err := p.Validate(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	msgs := make([]*nats.Msg, len(es))
	for i, e := range es {
		msgs[i], errs[i] = p.message(e)
	}
	if nc := p.js.Conn(); nc != nil && !nc.IsConnected() {
		// Do not fill the reconnect buffer: the relay will try again.
		down := fmt.Errorf("%w (connection %s)", nats.ErrDisconnected, nc.Status())
		for i := range es {
			if errs[i] == nil {
				errs[i] = p.failed(ctx, es[i], msgs[i].Subject, down)
			}
		}
		return errs
	}
	futures := p.send(ctx, es, msgs, errs)
	p.await(ctx, es, msgs, futures, errs)
	return errs
}

// send publishes each message that has no error yet, asynchronously, and
// returns the futures of the sent ones. After a failure that says NATS is
// down, it sends nothing more.
func (p *Publisher) send(ctx context.Context, es []*outbox.Envelope, msgs []*nats.Msg, errs []error) []jetstream.PubAckFuture {
	futures := make([]jetstream.PubAckFuture, len(es))
	var down error
	for i, m := range msgs {
		if errs[i] != nil {
			continue
		}
		if down != nil {
			errs[i] = p.failed(ctx, es[i], m.Subject, fmt.Errorf("not sent after an earlier failure: %w", down))
			continue
		}
		f, err := p.js.PublishMsgAsync(m, jetstream.WithStallWait(p.cfg.ackTimeout))
		if err != nil {
			if errs[i] = p.failed(ctx, es[i], m.Subject, err); outbox.IsUnavailable(errs[i]) {
				down = err
			}
			continue
		}
		futures[i] = f
	}
	return futures
}

// await waits for the acknowledgement of every future, and then looks up
// the subjects of messages no stream answered.
func (p *Publisher) await(ctx context.Context, es []*outbox.Envelope, msgs []*nats.Msg, futures []jetstream.PubAckFuture, errs []error) {
	actx, cancel := context.WithTimeout(ctx, p.cfg.ackTimeout)
	defer cancel()
	silent := map[string]error{} // subject → the lookup's verdict
	for i, f := range futures {
		if f == nil {
			continue
		}
		var err error
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				p.cfg.Logger.DebugContext(ctx, "outboxnats: JetStream dropped a duplicate; counted as published",
					"event_id", es[i].ID, "event_type", es[i].Type, "stream", ack.Stream, "seq", ack.Sequence)
			}
			continue
		case err = <-f.Err():
		case <-actx.Done():
			err = fmt.Errorf("no acknowledgement within %v: %w", p.cfg.ackTimeout, actx.Err())
		}
		subject := msgs[i].Subject
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) {
			verdict, ok := silent[subject]
			if !ok {
				verdict = p.lookup(ctx, subject)
				silent[subject] = verdict
			}
			err = fmt.Errorf("%w: %w", verdict, err)
		}
		errs[i] = p.failed(ctx, es[i], subject, err)
	}
}

// message builds the NATS message of e.
func (p *Publisher) message(e *outbox.Envelope) (*nats.Msg, error) {
	if e == nil {
		return nil, outbox.Permanent(fmt.Errorf("%w: nil envelope", ErrInvalidMessage))
	}
	if strings.TrimSpace(e.ID) == "" || !headerValueOK(e.ID) {
		return nil, outbox.Permanent(fmt.Errorf("%w: event of type %q has no id usable as %s (%q)", ErrInvalidMessage, e.Type, jetstream.MsgIDHeader, e.ID))
	}
	subject, err := p.Subject(e)
	if err != nil {
		return nil, err
	}
	body, err := adapterkit.EncodeEnvelope(e, p.cfg.Source, ErrInvalidMessage)
	if err != nil {
		return nil, err
	}
	m := nats.NewMsg(subject)
	m.Data = body
	for k, v := range e.Headers {
		if headerOK(k, v) {
			m.Header.Set(k, v)
		}
	}
	m.Header.Set(jetstream.MsgIDHeader, e.ID)
	m.Header.Set(HeaderContentType, ContentType)
	if headerValueOK(e.Type) {
		m.Header.Set(HeaderEventType, e.Type)
	}
	if e.PartitionKey != "" && headerValueOK(e.PartitionKey) {
		m.Header.Set(HeaderPartitionKey, e.PartitionKey)
	}
	if p.cfg.expectStream != "" {
		m.Header.Set(jetstream.ExpectedStreamHeader, p.cfg.expectStream)
	}
	return m, nil
}

// Describe says where the Publisher publishes, for relay heartbeats and
// "outbox stats" (it implements relay.Describer): the subject of events
// without a Topic, how Topics map, and the server it is connected to.
func (p *Publisher) Describe() string {
	if p.Validate() != nil {
		return "nats jetstream (invalid publisher)"
	}
	d := "nats jetstream subject " + p.cfg.prefix + "<Topic> (default " + p.cfg.prefix + p.cfg.defaultSubject + ")"
	if p.cfg.subjectFunc != nil {
		d = "nats jetstream subject " + p.cfg.prefix + "<chosen by WithSubjectFunc> (default " + p.cfg.prefix + p.cfg.defaultSubject + ")"
	}
	if p.cfg.expectStream != "" {
		d += " in stream " + p.cfg.expectStream
	}
	if nc := p.js.Conn(); nc != nil {
		if url := nc.ConnectedUrlRedacted(); url != "" {
			d += " on " + url
		}
	}
	return d
}
