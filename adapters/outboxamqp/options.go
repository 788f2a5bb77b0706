package outboxamqp

import (
	"log/slog"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// DefaultConfirmTimeout is how long a Publisher waits for the broker's
// confirms of a batch, unless WithConfirmTimeout says otherwise (the
// relay's deadline, its lease, applies too).
const DefaultConfirmTimeout = 30 * time.Second

// Option configures a Publisher. Bad options are reported by NewPublisher
// and Validate. The Consumer's options are consume.Options (see
// NewConsumer).
type Option func(*publisherConfig)

type publisherConfig struct {
	adapterkit.PublisherConfig
	exchange       string
	routing        func(e *outbox.Envelope) (exchange, key string)
	confirmTimeout time.Duration
	message        func(e *outbox.Envelope, m *amqp.Publishing)
	dial           DialFunc
	topology       func(ch *amqp.Channel) error
}

// WithSource sets the CloudEvents source of the envelopes published, when
// the envelope has none (default outbox.DefaultSource); it is also the
// message's app-id. It must not be empty.
func WithSource(source string) Option {
	return func(c *publisherConfig) {
		c.SetSource(source)
	}
}

// WithExchange publishes every event to the exchange name, with the
// event's Topic as its routing key (its Type when it has no Topic). The
// default is "", AMQP's default exchange, which routes a message to the
// queue named by its routing key: the Topic then names the queue.
// WithRouting overrides it.
func WithExchange(name string) Option {
	return func(c *publisherConfig) {
		if len(name) > maxShortStr {
			c.Fail("exchange name is longer than %d bytes", maxShortStr)
		}
		c.exchange = name
	}
}

// WithRouting chooses the exchange and routing key of each event, such as
// a topic exchange routed by event type:
//
//	outboxamqp.WithRouting(func(e *outbox.Envelope) (string, string) { return "events", e.Type })
//
// It must be deterministic and safe for concurrent use. A name longer
// than 255 bytes fails the event with ErrInvalidMessage (permanent).
func WithRouting(f func(e *outbox.Envelope) (exchange, key string)) Option {
	return func(c *publisherConfig) {
		if f == nil {
			c.Fail("routing function is nil")
		}
		c.routing = f
	}
}

// WithConfirmTimeout bounds how long the Publisher waits for the broker to
// confirm a batch (default DefaultConfirmTimeout; zero waits until the
// relay's deadline). Events not confirmed in time fail with
// ErrConfirmTimeout, marked outbox.Unavailable: they may have reached the
// broker, and are published again later.
func WithConfirmTimeout(d time.Duration) Option {
	return func(c *publisherConfig) {
		if d < 0 {
			c.Fail("confirm timeout %v is negative", d)
		}
		c.confirmTimeout = d
	}
}

// WithMessage lets f adjust each event's message before it is published:
// its priority, expiration, correlation id, more headers, or
// DeliveryMode (Transient, to trade durability for speed). The Publisher
// sets MessageId and Body after f, so those stay the event id and the
// envelope. f must be safe for concurrent use; m.Headers is never nil.
func WithMessage(f func(e *outbox.Envelope, m *amqp.Publishing)) Option {
	return func(c *publisherConfig) {
		if f == nil {
			c.Fail("message function is nil")
		}
		c.message = f
	}
}

// WithDial gives a function that opens a new connection when the current
// one is closed (by a network failure, a broker restart or shutdown): the
// Publisher dials on its next publish. Connections it dialled are closed
// by Publisher.Close; the connection passed to NewPublisher, if any, is
// never closed by this package. With WithDial, that connection may be
// nil: the first publish dials. See Dialer; WithConsumerDial is the
// Consumer's.
func WithDial(dial DialFunc) Option {
	return func(c *publisherConfig) {
		if dial == nil {
			c.Fail("dial function is nil")
		}
		c.dial = dial
	}
}

// WithLogger sets the Publisher's logger (default slog.Default()).
// Payloads are never logged. A Consumer's is consume.WithLogger.
func WithLogger(l *slog.Logger) Option {
	return func(c *publisherConfig) {
		c.SetLogger(l)
	}
}

// WithTopology declares what the Publisher needs (exchanges, queues,
// bindings, dead-letter arguments) on each new connection, before its
// first publish there. f runs on a channel of its own that is closed
// afterwards; it must be idempotent (AMQP declarations are). An error is
// logged and the batch reported outbox.Unavailable (no attempt spent),
// until f succeeds. WithConsumerTopology is the Consumer's.
func WithTopology(f func(ch *amqp.Channel) error) Option {
	return func(c *publisherConfig) {
		if f == nil {
			c.Fail("topology function is nil")
		}
		c.topology = f
	}
}
