package consume

import (
	"context"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// Handler handles one event. Its error decides the message's fate, the
// same way on every broker:
//
//   - nil: the message is acknowledged;
//   - outbox.Permanent(err): dead at once (the broker's dead letter);
//   - outbox.Unavailable(err): the handler's own dependency is down: the
//     message is delivered again later without counting towards
//     WithMaxDeliveries, and the consumer pauses before it goes on;
//   - outbox.Snooze(err, d) and idempotency.ErrInProgress: delivered
//     again after d (the retry delay for ErrInProgress), not counted;
//   - any other error: delivered again after the retry delay (doubling up
//     to WithMaxRetryDelay), and dead once WithMaxDeliveries runs failed.
//
// A handler can be called again for an event it already handled (delivery
// is at least once): wrap it with Idempotent or IdempotentTx. DeliveryFrom
// tells it which run it is; EnvelopeFrom gives the envelope to typed
// handlers.
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

// Validator is implemented by handlers that can be checked before they
// run, such as those Idempotent returns: New reports the error of
// Validate, and does not make the Consumer.
type Validator interface {
	Validate() error
}

// validate returns h's own configuration error, if it has one.
func validate(h any) error {
	if v, ok := h.(Validator); ok {
		return v.Validate()
	}
	return nil
}
