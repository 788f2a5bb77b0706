package outboxnats

import (
	"log/slog"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// DefaultSubject is the subject of events that have no Topic (and that
// the subject function, if any, leaves unnamed), unless WithDefaultSubject
// says otherwise; the prefix of WithSubjectPrefix goes before it.
const DefaultSubject = "outbox"

// DefaultAckTimeout is how long PublishBatch waits, after sending a batch,
// for JetStream to acknowledge its messages, unless WithAckTimeout says
// otherwise. The relay's own deadline (shortly before its lease expires)
// may end the wait sooner.
const DefaultAckTimeout = 10 * time.Second

// Header names the Publisher sets on every message, besides
// jetstream.MsgIDHeader ("Nats-Msg-Id", the event id) and the event's own
// headers.
const (
	// HeaderContentType is "application/cloudevents+json; charset=utf-8":
	// the data is a CloudEvents 1.0 event in structured mode.
	HeaderContentType = "Content-Type"
	// HeaderEventType holds the event type, for consumers that filter
	// without decoding the data.
	HeaderEventType = "Outbox-Event-Type"
	// HeaderPartitionKey holds the event's PartitionKey, when it has one.
	HeaderPartitionKey = "Outbox-Partition-Key"
)

// ContentType is the value of HeaderContentType.
const ContentType = "application/cloudevents+json; charset=utf-8"

// Option configures a Publisher; NewPublisher reports a bad one. The
// Consumer's options are consume.Options (see NewConsumer).
type Option func(*pubConfig)

type pubConfig struct {
	adapterkit.PublisherConfig
	prefix         string
	defaultSubject string
	subjectFunc    func(e *outbox.Envelope) string
	expectStream   string
	ackTimeout     time.Duration
}

// WithSource sets the CloudEvents source of the events published, when the
// envelope has none (default outbox.DefaultSource). It must not be empty.
func WithSource(source string) Option {
	return func(c *pubConfig) {
		c.SetSource(source)
	}
}

// WithSubjectPrefix puts prefix before every subject, such as "shop." to
// publish the Topic "orders" to "shop.orders". The default is none. The
// prefix followed by a token must be a valid subject.
func WithSubjectPrefix(prefix string) Option {
	return func(c *pubConfig) {
		if err := checkPrefix(prefix); err != nil {
			c.Fail("%v", err)
		}
		c.prefix = prefix
	}
}

// WithDefaultSubject sets the subject of events with no Topic (default
// DefaultSubject, "outbox"), after the prefix. It must be a valid subject.
func WithDefaultSubject(subject string) Option {
	return func(c *pubConfig) {
		if err := checkSubject(subject); err != nil {
			c.Fail("default subject: %v", err)
		}
		c.defaultSubject = subject
	}
}

// WithSubjectFunc chooses the subject of each event with fn instead of its
// Topic, such as "orders." + e.Type. An empty result means the default
// subject; the prefix goes before the result. fn must be deterministic and
// safe for concurrent use; an event whose subject is invalid fails with
// ErrInvalidSubject, marked outbox.Permanent.
func WithSubjectFunc(fn func(e *outbox.Envelope) string) Option {
	return func(c *pubConfig) {
		if fn == nil {
			c.Fail("nil subject function")
		}
		c.subjectFunc = fn
	}
}

// WithExpectStream makes JetStream refuse a message unless the stream that
// captures its subject is named stream (the Nats-Expected-Stream header),
// so that an event published to a subject another stream captures fails
// instead of landing there. Such a failure is an ordinary error: the relay
// retries it, then marks the event dead.
func WithExpectStream(stream string) Option {
	return func(c *pubConfig) {
		if stream == "" {
			c.Fail("empty expected stream")
		}
		c.expectStream = stream
	}
}

// WithAckTimeout sets how long PublishBatch waits for JetStream's
// acknowledgements of a batch, once it is sent (default DefaultAckTimeout,
// at least 1ms). Messages not acknowledged by then fail with an error
// marked outbox.Unavailable: the relay spends no attempt, and publishes
// them again later, when the duplicate window drops any that JetStream
// did store.
func WithAckTimeout(d time.Duration) Option {
	return func(c *pubConfig) {
		if d < time.Millisecond {
			c.Fail("ack timeout %v is shorter than 1ms", d)
		}
		c.ackTimeout = d
	}
}

// WithLogger sets the Publisher's logger (default slog.Default()). It logs
// at debug level only (the relay reports outcomes); payloads are never
// logged. A Consumer's is consume.WithLogger.
func WithLogger(l *slog.Logger) Option {
	return func(c *pubConfig) {
		c.SetLogger(l)
	}
}
