package outboxasynq

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// ErrBadPayload is wrapped, marked outbox.Permanent, by the error of a
// handler made with HandlerOf or TxHandlerOf whose event's payload does
// not decode into the handler's type. The message names the event id, its
// type and the Go type.
var ErrBadPayload = errors.New("outboxasynq: payload does not decode")

// HandlerOf is Handler for a function of the decoded payload:
//
//	mux.Handle("order.created", outboxasynq.HandlerOf(func(ctx context.Context, o Order) error {
//		return mailer.Receipt(ctx, o.Email, o.Total)
//	}))
//
// The event's JSON payload is decoded into a T (encoding/json); a payload
// that does not decode fails the task with an error wrapping
// ErrBadPayload, marked outbox.Permanent, so that asynq archives it
// without a retry, and fn is not called. fn's context carries the
// envelope (EnvelopeFrom) and asynq's view of the task (DeliveryFrom).
// Everything else is as for Handler, which HandlerOf uses; it panics if
// fn is nil. With WithRegistry(reg), the payload is upcast and checked
// with the registry first, and T must be the type registered for the
// event.
func HandlerOf[T any](fn func(ctx context.Context, v T) error, opts ...HandlerOption) asynq.Handler {
	if fn == nil {
		panic("outboxasynq: HandlerOf(nil)")
	}
	reg := registryOf(opts)
	return Handler(func(ctx context.Context, e *outbox.Envelope) error {
		var (
			v   T
			err error
		)
		if reg != nil {
			_, v, err = adapterkit.DecodeRegistered[T](reg, e, ErrBadPayload)
		} else {
			v, err = decodePayload[T](e)
		}
		if err != nil {
			return err
		}
		return fn(ctx, v)
	}, opts...)
}

// decodePayload decodes e's JSON payload into a T, or fails with
// ErrBadPayload (outbox.Permanent).
func decodePayload[T any](e *outbox.Envelope) (T, error) {
	return adapterkit.DecodePayload[T](e, ErrBadPayload)
}

// EnvelopeFrom returns the envelope of the event whose handler, run by
// Handler or HandlerOf, received ctx.
func EnvelopeFrom(ctx context.Context) (*outbox.Envelope, bool) {
	d, ok := ctx.Value(decodedKey{}).(decoded)
	return d.env, ok && d.env != nil
}
