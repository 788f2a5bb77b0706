package outboxredis

import (
	"context"
	"errors"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// ErrBadPayload is wrapped, marked outbox.Permanent, by the error of a
// handler made with HandlerOf or TxHandlerOf whose event's payload does
// not decode into the handler's type. The message names the event id, its
// type and the Go type.
var ErrBadPayload = errors.New("outboxredis: payload does not decode")

// HandlerOf adapts a function of the decoded payload to a Handler:
//
//	h := outboxredis.HandlerOf(func(ctx context.Context, o Order) error {
//		return mailer.Receipt(ctx, o.Email, o.Total)
//	})
//	c := outboxredis.NewConsumer(rdb, "shop:orders", "mailer", hostname, outboxredis.Idempotent(store, "receipt", h))
//
// The event's JSON payload is decoded into a T (encoding/json); a payload
// that does not decode fails the handler with an error wrapping
// ErrBadPayload, marked outbox.Permanent (the message is dead at once),
// and fn is not called. fn's context carries the envelope (EnvelopeFrom),
// for its id or headers, and the Delivery (DeliveryFrom). A nil fn gives a
// nil Handler, which NewConsumer refuses. With Registered(reg), the
// payload is upcast and checked with the registry first, and T must be the
// type registered for the event.
func HandlerOf[T any](fn func(ctx context.Context, v T) error, opts ...TypedOption) Handler {
	if fn == nil {
		return nil
	}
	c := typedOptions(opts)
	return HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		e, v, err := decodeWith[T](c, e)
		if err != nil {
			return err
		}
		return fn(withEnvelope(ctx, e), v)
	})
}

// TxHandlerOf is HandlerOf for IdempotentTx: fn writes through tx, which
// commits together with the handler's idempotency record. A nil fn gives
// a nil TxHandlerFunc, which IdempotentTx reports.
func TxHandlerOf[T any](fn func(ctx context.Context, tx *gorm.DB, v T) error, opts ...TypedOption) TxHandlerFunc {
	if fn == nil {
		return nil
	}
	c := typedOptions(opts)
	return func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		e, v, err := decodeWith[T](c, e)
		if err != nil {
			return err
		}
		return fn(withEnvelope(ctx, e), tx, v)
	}
}

// decodePayload decodes e's JSON payload into a T, or fails with
// ErrBadPayload (outbox.Permanent).
func decodePayload[T any](e *outbox.Envelope) (T, error) {
	return adapterkit.DecodePayload[T](e, ErrBadPayload)
}

func withEnvelope(ctx context.Context, e *outbox.Envelope) context.Context {
	return adapterkit.WithEnvelope(ctx, e)
}

// EnvelopeFrom returns the envelope of the event whose handler, made with
// HandlerOf or TxHandlerOf, received ctx.
func EnvelopeFrom(ctx context.Context) (*outbox.Envelope, bool) {
	return adapterkit.EnvelopeFrom(ctx)
}
