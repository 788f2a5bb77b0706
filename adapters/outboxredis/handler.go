package outboxredis

import (
	"context"
	"fmt"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// Handler handles one event read from a stream. Its error decides the
// message's fate: nil acknowledges it; outbox.Permanent(err) dead-letters
// it at once; any other error leaves it pending, to be delivered again, up
// to WithMaxDeliveries times. Runs that end in outbox.Unavailable or
// idempotency.ErrInProgress, and deliveries that never reached the handler,
// do not count towards that limit (they are recorded in Redis, see
// ExcusedKey, so this holds across restarts and consumers). DeliveryFrom
// tells the handler which run it is.
// A handler can be called again for an event it already handled: wrap it
// with Idempotent or IdempotentTx.
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
// succeeded for it, as recorded in store under "<event id>:<name>"
// (idempotency.Store.Do): duplicate stream entries and redeliveries skip
// it. h's effects and the record do not commit atomically; use
// IdempotentTx for writes to the store's database. While h runs, the same
// event arriving elsewhere fails with idempotency.ErrInProgress and stays
// pending, to be retried.
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
// event, whatever the duplicates and redeliveries.
func IdempotentTx(store *idempotency.Store, name string, fn TxHandlerFunc) Handler {
	return &idempotent{adapterkit.Idempotent{Store: store, Name: name, Tx: fn}}
}

type idempotent struct{ adapterkit.Idempotent }

// Validate reports a nil store or function and a bad name; Consumer's
// Validate calls it.
func (m *idempotent) Validate() error {
	if err := m.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return nil
}

// Delivery describes the stream entry a handler is given.
type Delivery struct {
	Stream   string
	Group    string
	Consumer string
	// EntryID is the stream entry's id, such as "1700000000000-0".
	EntryID string
	// Deliveries is Redis's delivery counter of this entry in the group,
	// this delivery included: 1 the first time. It also counts deliveries
	// that never reached a handler and runs that do not count (see
	// Attempt).
	Deliveries int64
	// Attempt counts the handler runs for this entry that count towards
	// WithMaxDeliveries, this one included, from 1: Deliveries less the
	// deliveries that never reached the handler and the runs that ended in
	// outbox.Unavailable or idempotency.ErrInProgress. It is the
	// consumer's count, not the relay's (outbox.Envelope.Attempt counts
	// the relay's attempts to append the event).
	Attempt int64
	// MaxAttempts is the consumer's WithMaxDeliveries: if the run whose
	// Attempt equals it fails, the entry is dead.
	MaxAttempts int64
}

// LastAttempt reports whether a failure of this run makes the entry dead
// (an error other than outbox.Unavailable or idempotency.ErrInProgress).
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
