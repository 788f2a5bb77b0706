package outboxkafka

import (
	"log/slog"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// DefaultAckTimeout is how long PublishBatch waits for the broker to
// acknowledge a batch's records, unless WithAckTimeout says otherwise. The
// relay's own deadline (shortly before its lease expires) may end the wait
// sooner.
const DefaultAckTimeout = 30 * time.Second

// Layout is how an event becomes a Kafka record.
type Layout int

const (
	// Structured is the CloudEvents Kafka protocol binding in structured
	// mode, the default: the value is the envelope's CloudEvents 1.0 JSON
	// (outbox.DecodeEnvelope reads it back), the header content-type is
	// ContentType.
	Structured Layout = iota
	// Binary is the CloudEvents Kafka protocol binding in binary mode: the
	// value is the payload, the header content-type its media type, and
	// each CloudEvents attribute and extension a header "ce_<name>"
	// (ce_specversion, ce_id, ce_source, ce_type, ce_subject, ce_time,
	// ce_aggregatetype, ce_partitionkey, ce_traceparent, …).
	Binary
	// Debezium is the record Debezium's outbox event router writes with
	// its default settings: topic "outbox.event.<AggregateType>", key the
	// AggregateID, value the payload, one header "id" holding the event
	// id, and nothing else.
	Debezium
)

// ContentType is the content-type header of a record in the Structured
// layout.
const ContentType = "application/cloudevents+json; charset=UTF-8"

// String names the layout.
func (l Layout) String() string {
	switch l {
	case Structured:
		return "structured"
	case Binary:
		return "binary"
	case Debezium:
		return "debezium"
	}
	return "unknown"
}

// Option configures a Publisher; NewPublisher reports a bad one.
type Option func(*config)

type config struct {
	adapterkit.PublisherConfig
	topic      string
	topicFunc  func(e *outbox.Envelope) string
	layout     Layout
	ackTimeout time.Duration
}

// WithTopic sets the topic of events that have no Topic (and that
// WithTopicFunc, if given, leaves unnamed). It must be a valid topic name.
// Without it, such an event fails with ErrNoTopic.
func WithTopic(name string) Option {
	return func(c *config) {
		if err := checkTopic(name); err != nil {
			c.Fail("WithTopic: %v", err)
		}
		c.topic = name
	}
}

// WithTopicFunc chooses the topic of each event with fn instead of its
// Topic (or, in the Debezium layout, instead of
// "outbox.event.<AggregateType>"), such as "shop." + e.AggregateType. An
// empty result means WithTopic's topic. fn must be deterministic and safe
// for concurrent use.
func WithTopicFunc(fn func(e *outbox.Envelope) string) Option {
	return func(c *config) {
		if fn == nil {
			c.Fail("nil topic function")
		}
		c.topicFunc = fn
	}
}

// WithLayout sets how events become records (default Structured).
func WithLayout(l Layout) Option {
	return func(c *config) {
		if l < Structured || l > Debezium {
			c.Fail("unknown layout %d", int(l))
		}
		c.layout = l
	}
}

// WithSource sets the CloudEvents source of the events published, when the
// envelope has none (default outbox.DefaultSource). It must not be empty.
func WithSource(source string) Option {
	return func(c *config) {
		c.SetSource(source)
	}
}

// WithAckTimeout sets how long PublishBatch waits for the broker to
// acknowledge a batch's records (default DefaultAckTimeout; zero waits
// until the relay's deadline). Records not acknowledged by then fail with
// an error marked outbox.Unavailable: the relay spends no attempt and
// publishes them again later; the client may still deliver the first
// copy (at least once).
func WithAckTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.Fail("negative ack timeout %v", d)
		}
		c.ackTimeout = d
	}
}

// WithLogger sets the logger (default slog.Default()). The Publisher logs
// one debug line per batch, with the partitions and offsets written;
// payloads are never logged.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		c.SetLogger(l)
	}
}
