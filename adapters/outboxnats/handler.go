package outboxnats

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// Handler handles one event consumed from JetStream. Its result decides
// the message's fate: nil acknowledges it; outbox.Permanent makes it dead
// at once; outbox.Unavailable (the handler's own dependency is down) and
// idempotency.ErrInProgress (the event is being handled elsewhere) have it
// delivered again later without counting; any other error has it delivered
// again after a delay, until its attempts are spent (see Consumer).
type Handler interface {
	Handle(ctx context.Context, e *outbox.Envelope) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, e *outbox.Envelope) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, e *outbox.Envelope) error { return f(ctx, e) }

// TxHandlerFunc handles one event inside a database transaction, in which
// its idempotency record commits too (see IdempotentTx).
type TxHandlerFunc func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error

// Idempotent returns a Handler that runs h for an event unless h already
// succeeded for it, as recorded in store under idempotency.HandlerKey(event
// id, name), that is "<event id>:<name>" (idempotency.Store.Do): duplicate
// messages (published again after the duplicate window, or by another
// producer) and redeliveries skip it. h's effects and the record do not
// commit atomically (a crash between them runs h again); use IdempotentTx
// for writes to the store's database. While h runs, the same event
// delivered elsewhere fails with idempotency.ErrInProgress and is
// delivered again later, without counting.
func Idempotent(store *idempotency.Store, name string, h Handler) Handler {
	m := &idempotent{adapterkit.Idempotent{Store: store, Name: name}}
	if h != nil {
		m.Fn = h.Handle
	}
	return m
}

// IdempotentTx returns a Handler that runs fn inside a transaction of
// store's database together with the record "<event id>:<name>"
// (idempotency.Store.DoTx): fn's writes through tx happen exactly once per
// event, whatever the duplicates and redeliveries. An error from fn rolls
// its writes back. Keep the transaction short.
func IdempotentTx(store *idempotency.Store, name string, fn TxHandlerFunc) Handler {
	return &idempotent{adapterkit.Idempotent{Store: store, Name: name, Tx: fn}}
}

type idempotent struct{ adapterkit.Idempotent }

// Validate reports a nil store or handler and a bad name; NewConsumer
// calls it.
func (m *idempotent) Validate() error {
	if err := m.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return nil
}

// Delivery describes the JetStream message a handler is given: what the
// server knows of it, as opposed to the envelope's Attempt, which counts
// the relay's attempts to publish the event (1 for nearly every event).
type Delivery struct {
	// Stream and Consumer name the stream and the durable consumer.
	Stream   string
	Consumer string
	// Subject is the message's subject.
	Subject string
	// StreamSeq is the message's sequence in the stream; ConsumerSeq the
	// delivery's sequence in the consumer.
	StreamSeq   uint64
	ConsumerSeq uint64
	// NumDelivered is the server's delivery count of this message to the
	// consumer, this delivery included: 1 the first time. It counts every
	// delivery, those that do not count towards WithMaxDeliveries too.
	NumDelivered uint64
	// NumPending is how many messages of the consumer wait behind this one.
	NumPending uint64
	// Timestamp is when the stream stored the message.
	Timestamp time.Time
	// Header holds the message's NATS headers (read them; do not modify).
	Header nats.Header
	// Attempt counts the handler runs for this message that count towards
	// WithMaxDeliveries, this one included, from 1: NumDelivered less the
	// deliveries this process excused (see Consumer).
	Attempt int
	// MaxAttempts is the consumer's WithMaxDeliveries.
	MaxAttempts int
}

// LastAttempt reports whether a failure of this run (an error other than
// outbox.Unavailable or idempotency.ErrInProgress) makes the message dead.
func (d Delivery) LastAttempt() bool { return d.Attempt >= d.MaxAttempts }

type deliveryKey struct{}

// DeliveryFrom returns the Delivery of the message whose handler received
// ctx; ok is false outside a Consumer's handler.
func DeliveryFrom(ctx context.Context) (d Delivery, ok bool) {
	d, ok = ctx.Value(deliveryKey{}).(Delivery)
	return d, ok
}

func withDelivery(ctx context.Context, d Delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}
