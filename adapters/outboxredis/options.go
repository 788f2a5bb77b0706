package outboxredis

import (
	"log/slog"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// DefaultStream is the stream of events that have no Topic (and that the
// stream function, if any, leaves unnamed), unless WithDefaultStream says
// otherwise.
const DefaultStream = "outbox"

// Field names of a stream entry written by StreamPublisher.
const (
	// FieldEvent holds the envelope's CloudEvents 1.0 structured JSON.
	FieldEvent = "event"
	// FieldID holds the event id, for consumers that dedupe or filter
	// without decoding the JSON.
	FieldID = "id"
	// FieldType holds the event type.
	FieldType = "type"
)

// Option configures a StreamPublisher. A bad value is reported by
// Validate (and so by relay.New). A Consumer's options are consume.Options
// (see NewConsumer).
type Option func(*pubConfig)

type pubConfig struct {
	adapterkit.PublisherConfig
	defaultStream string
	prefix        string
	streamFunc    func(e *outbox.Envelope) string
	maxLen        int64
	producerID    string
	keyChain      bool
	waitReplicas  int           // WithWaitReplicas: 0 for none
	waitTimeout   time.Duration // WithWaitReplicas
}

// WithSource sets the CloudEvents source of the events published, when
// the envelope has none (default outbox.DefaultSource). It must not be
// empty.
func WithSource(source string) Option {
	return func(c *pubConfig) {
		c.SetSource(source)
	}
}

// WithDefaultStream sets the stream of events with no Topic (default
// DefaultStream, "outbox"). It must not be empty. WithStreamPrefix
// applies to it too.
func WithDefaultStream(name string) Option {
	return func(c *pubConfig) {
		if name == "" {
			c.Fail("empty default stream")
		}
		c.defaultStream = name
	}
}

// WithStreamPrefix puts prefix before every stream name, such as "app:"
// to make "app:orders" of the topic "orders". The default is none.
func WithStreamPrefix(prefix string) Option {
	return func(c *pubConfig) { c.prefix = prefix }
}

// WithStreamFunc chooses the stream of each event with fn instead of its
// Topic. An empty result means the default stream. The prefix of
// WithStreamPrefix is added to fn's result.
func WithStreamFunc(fn func(e *outbox.Envelope) string) Option {
	return func(c *pubConfig) {
		if fn == nil {
			c.Fail("nil stream function")
		}
		c.streamFunc = fn
	}
}

// WithMaxLen trims every stream written to about n entries (XADD MAXLEN ~ n):
// Redis trims whole macro nodes only, so a stream can hold somewhat more
// than n entries, but never grows without bound. Zero (the default) keeps
// everything. Keep n well above the consumers' backlog: an entry trimmed
// before a consumer group read it is never delivered to that group.
func WithMaxLen(n int64) Option {
	return func(c *pubConfig) {
		if n < 0 {
			c.Fail("max length %d is negative", n)
		}
		c.maxLen = n
	}
}

// WithIdempotentProducer asks Redis to drop duplicate appends of one event
// (XADD … IDMP producerID eventID), which Redis supports from version 8.6:
// a relay that redelivers an event after a crash then appends it once.
// The publisher asks the server its version the first time it publishes
// and, on an older Redis, appends without IDMP. Consumers must dedupe by
// event id regardless (see Idempotent): IDMP remembers ids for a limited
// window only, and streams can be written by other producers.
// producerID names this producer to Redis and must not be empty; use the
// same one in every relay process of an application.
func WithIdempotentProducer(producerID string) Option {
	return func(c *pubConfig) {
		if producerID == "" {
			c.Fail("empty idempotent producer id")
		}
		c.producerID = producerID
	}
}

// WithLogger sets the publisher's logger (default slog.Default()). A
// Consumer's is consume.WithLogger.
func WithLogger(l *slog.Logger) Option {
	return func(c *pubConfig) {
		c.SetLogger(l)
	}
}

// WithKeyChain makes every event with a PartitionKey name, in its entry's
// FieldAfter, the entry appended before it to the same stream for the same
// key, so that consumers WithKeyOrder handle the events of a key one at a
// time, in order. The relay appends the events of a key one at a time in
// their commit order; the publisher appends each keyed event and records
// it as its key's last in one script (ChainKey, kept for KeyChainTTL), in
// the stream's Redis Cluster slot. An event appended twice (a relay's
// redelivery) is chained after its first copy. Events without a key are
// appended as usual. Chained appends do not use IDMP
// (WithIdempotentProducer): consumers dedupe by event id.
func WithKeyChain() Option {
	return func(c *pubConfig) { c.keyChain = true }
}

// WithWaitReplicas makes the publisher report an event published only once
// at least n replicas of the Redis master that took its entry have it:
// after the appends of a batch it sends WAIT n timeout on the same
// connection to each master (at most 10s; keep it below the client's
// ReadTimeout, 3s by default). Redis replicates asynchronously, so an entry
// a master acknowledged and lost before any replica had it (the master's
// machine lost, or a partition between master and replicas followed by a
// failover) is lost for good unless the relay is told it is not safe yet:
// when fewer than n replicas acknowledged in time, the batch's events on
// that master are reported outbox.Unavailable, wrapping ErrNotReplicated,
// and the relay appends them again later without spending their attempts
// (the stream may then hold an event twice: consumers dedupe by event id).
// It needs a *redis.Client or a *redis.ClusterClient (where it sends WAIT
// to the master of each stream's slot); a Redis with no replica waits the
// timeout and publishes nothing. It costs a round trip per master and
// batch, and the replicas' delay.
func WithWaitReplicas(n int, timeout time.Duration) Option {
	return func(c *pubConfig) {
		if n < 1 || timeout <= 0 || timeout > 10*time.Second {
			c.Fail("wait for %d replicas within %v: want at least 1 replica and a timeout up to 10s", n, timeout)
		}
		c.waitReplicas, c.waitTimeout = n, timeout
	}
}
