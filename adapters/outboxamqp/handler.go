package outboxamqp

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// Handler handles one event consumed from a queue. Its error decides the
// message's fate: nil acknowledges it; outbox.Permanent(err) makes it
// dead at once (rejected without requeue: dead-lettered if the queue has
// a dead-letter exchange); any other error requeues it after the retry
// delay, up to WithMaxDeliveries failures. Runs that end in
// outbox.Unavailable or idempotency.ErrInProgress requeue it without
// counting. A handler can be called again for an event it already
// handled: wrap it with Idempotent or IdempotentTx.
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
// succeeded for it, as recorded in store under idempotency.HandlerKey
// ("<event id>:<name>", idempotency.Store.Do): redeliveries and duplicate
// messages of an event skip it. h's effects and the record do not commit
// atomically (a crash between them runs h again); use IdempotentTx for
// writes to the store's database. While h runs, the same event arriving
// elsewhere fails with idempotency.ErrInProgress and is requeued without
// counting.
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
// event, whatever the redeliveries and duplicates. An error of fn rolls
// its writes back. Keep fn short: the transaction is open while it runs.
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

// Delivery describes the message a handler is given.
type Delivery struct {
	Queue       string
	ConsumerTag string
	// DeliveryTag is the message's tag on the consumer's channel.
	DeliveryTag uint64
	Exchange    string
	RoutingKey  string
	// Redelivered is the broker's flag: the message was delivered before
	// (to this or another consumer) and not acknowledged.
	Redelivered bool
	// DeliveryCount is the broker's x-delivery-count header (quorum
	// queues: the earlier deliveries of the message), 0 when absent.
	DeliveryCount int64
	// Attempt counts, from 1, the runs of the handler for this event on
	// this consumer that count towards WithMaxDeliveries, this one
	// included (failures other than outbox.Unavailable and
	// idempotency.ErrInProgress). It is the consumer's count, not the
	// relay's (outbox.Envelope.Attempt counts the relay's attempts to
	// publish the event).
	Attempt int
	// MaxAttempts is the consumer's WithMaxDeliveries: if the run whose
	// Attempt equals it fails, the message is dead.
	MaxAttempts int
	// Headers are the message's AMQP headers.
	Headers amqp.Table
}

// LastAttempt reports whether a failure of this run makes the message
// dead (an error other than outbox.Unavailable or
// idempotency.ErrInProgress).
func (d Delivery) LastAttempt() bool { return d.Attempt >= d.MaxAttempts }

type deliveryKey struct{}

// DeliveryFrom returns the Delivery of the message whose handler received
// ctx.
func DeliveryFrom(ctx context.Context) (Delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(Delivery)
	return d, ok
}

func withDelivery(ctx context.Context, d Delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}
