package consume

import (
	"context"
	"time"

	"github.com/gormoutbox/outbox"
)

// Transport is what a broker adapter implements for a Consumer: how
// messages arrive and how each is settled. The policy (what a handler's
// error means, retries, dead letters, order, spans, metrics, logs) is the
// Consumer's, the same for every broker; consumetest.Exercise checks that
// a transport keeps its side of it.
//
// A Consumer calls Receive from one goroutine, and settles each message it
// returned exactly once (Ack, Retry or Dead), or not at all when Begin
// said it is gone, possibly from other goroutines.
type Transport interface {
	// System names the broker for spans, metrics and logs
	// (OpenTelemetry's messaging.system: "redis", "rabbitmq", "nats",
	// "kafka").
	System() string
	// Destination names what is read (a stream, queue or topic).
	Destination() string
	// Receive waits for messages, for at most the transport's own poll
	// time, and returns those that arrived (none is not an error). It
	// returns early when ctx ends. An error is logged, and Receive is
	// called again after a backoff (100ms doubling to 5s).
	Receive(ctx context.Context) ([]Message, error)
}

// Message is one message a Transport received.
type Message interface {
	// Envelope decodes the outbox event the message carries. An error
	// wrapping ErrMalformed makes the message dead at once.
	Envelope() (*outbox.Envelope, error)
	// Begin is called right before the handler runs, when the Consumer
	// has decided to run it: a transport can claim the message now (so
	// that a delivery counts only once it reaches the handler), check
	// that it is still its own, or that its key's predecessor is done.
	// An error is logged and the message released (Retry, not counted).
	Begin(ctx context.Context) (Start, error)
	// Delivery describes this run (valid after Begin): Attempt is the
	// transport's count of the counted runs, this one included.
	// MaxAttempts is filled in by the Consumer when the transport leaves
	// it 0.
	Delivery() Delivery
	// Ack settles a message whose handler succeeded.
	Ack(ctx context.Context) error
	// Retry has the message delivered again after delay (0: as soon as
	// the transport can). counted says whether this delivery counts
	// towards MaxAttempts: false for a run that ended in Unavailable,
	// Snooze or ErrInProgress, and for a message released without
	// running (the rest of a batch after an outage, or when Run ends).
	Retry(ctx context.Context, delay time.Duration, counted bool) error
	// Dead settles a message that will not be handled again: the
	// transport moves it to its dead letter (a dead-letter stream, queue,
	// subject or topic, or the broker's own), and acknowledges it.
	Dead(ctx context.Context, reason error) error
}

// Start is what Begin decided.
type Start int

const (
	// Run: hand the message to the handler.
	Run Start = iota
	// Wait: not now (its key's predecessor is still pending): the message
	// is released (Retry, not counted), and so is the rest of its key in
	// the batch.
	Wait
	// Gone: the message is no longer this consumer's (another one adopted
	// it): it is left alone, neither run nor settled.
	Gone
)

// OrderKeyer is implemented by messages that must be handled in the order
// of a key of the transport's own, such as a Kafka partition. Other
// messages are ordered by their event's PartitionKey: within a batch, the
// messages of one key run one after the other, in the order received, and
// after one that did not succeed the rest of its key is released.
type OrderKeyer interface {
	OrderKey() string
}

// Closer is implemented by transports that hold resources while a
// Consumer runs; Run calls Close when it returns, after the last message
// was settled.
type Closer interface {
	Close(ctx context.Context) error
}

// OutageTeller is implemented by transports that can tell an error of
// Receive that means the broker is down (logged as a warning) from one
// that means something is wrong (logged as an error).
type OutageTeller interface {
	Outage(err error) bool
}
