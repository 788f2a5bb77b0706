package consume

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// HandlerOf adapts a function of the decoded payload to a Handler:
//
//	h := consume.HandlerOf(func(ctx context.Context, o Order) error {
//		return mailer.Receipt(ctx, o.Email, o.Total)
//	})
//
// The event's JSON payload is decoded into a T (encoding/json); a payload
// that does not decode fails the run with an error wrapping ErrBadPayload,
// marked outbox.Permanent (the message is dead at once), and fn is not
// called. fn's context carries the envelope (EnvelopeFrom) and, on a
// consumer, the Delivery (DeliveryFrom). With Registered(reg), the event
// is upcast and checked by the registry first, and T must be the payload
// type registered for it. A nil fn gives a nil Handler, which New refuses.
func HandlerOf[T any](fn func(ctx context.Context, v T) error, opts ...TypedOption) Handler {
	if fn == nil {
		return nil
	}
	c := typedOptions(opts)
	return HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		e, v, err := decodeWith[T](c.registry, e)
		if err != nil {
			return err
		}
		return fn(WithEnvelope(ctx, e), v)
	})
}

// TxHandlerOf is HandlerOf for IdempotentTx: fn writes through tx, which
// commits together with the handler's idempotency record. A nil fn gives
// a nil TxHandlerFunc, which IdempotentTx's Validate reports.
func TxHandlerOf[T any](fn func(ctx context.Context, tx *gorm.DB, v T) error, opts ...TypedOption) TxHandlerFunc {
	if fn == nil {
		return nil
	}
	c := typedOptions(opts)
	return func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		e, v, err := decodeWith[T](c.registry, e)
		if err != nil {
			return err
		}
		return fn(WithEnvelope(ctx, e), tx, v)
	}
}

// TypedOption configures HandlerOf and TxHandlerOf.
type TypedOption func(*typedConfig)

type typedConfig struct{ registry *outbox.Registry }

// Registered makes a typed handler use reg: the event is upcast and
// checked (outbox.Registry.Check), the payload type reg holds for its type
// and version must be the handler's T, and the handler receives the
// upcast payload (and, in its context, the upcast envelope). A failure
// wraps ErrBadPayload and is marked outbox.Permanent: the message is dead
// at once and fn is not called. A nil reg is ignored.
func Registered(reg *outbox.Registry) TypedOption {
	return func(c *typedConfig) { c.registry = reg }
}

func typedOptions(opts []TypedOption) typedConfig {
	var c typedConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c
}

// decodeWith decodes e's payload into a T, through reg when it is not nil,
// and returns the envelope the handler sees.
func decodeWith[T any](reg *outbox.Registry, e *outbox.Envelope) (*outbox.Envelope, T, error) {
	var zero T
	if reg != nil {
		c, err := checkEnvelope(reg, e)
		if err != nil {
			return nil, zero, err
		}
		if rt, ok := reg.TypeOf(c.Type, c.Version); ok && rt != reflect.TypeFor[T]() {
			return nil, zero, outbox.Permanent(fmt.Errorf("%w: event %s (%s v%d) is registered with payload %s, the handler takes %s",
				ErrBadPayload, c.ID, c.Type, c.Version, rt, reflect.TypeFor[T]()))
		}
		e = c
	}
	var v T
	if err := json.Unmarshal(e.Payload, &v); err != nil {
		return nil, zero, outbox.Permanent(fmt.Errorf("%w: event %s (%s) into %s: %w", ErrBadPayload, e.ID, e.Type, reflect.TypeFor[T](), err))
	}
	return e, v, nil
}

// checkEnvelope returns a copy of e upcast and checked with reg
// (outbox.Registry.Check). A failed check wraps ErrBadPayload and the
// registry's error, marked outbox.Permanent; e itself is not changed.
func checkEnvelope(reg *outbox.Registry, e *outbox.Envelope) (*outbox.Envelope, error) {
	c := *e
	if err := reg.Check(&c); err != nil {
		return nil, outbox.Permanent(fmt.Errorf("%w: event %s (%s v%d): %w", ErrBadPayload, e.ID, e.Type, e.Version, err))
	}
	return &c, nil
}

type envelopeKey struct{}

// WithEnvelope returns ctx carrying e, for EnvelopeFrom. Consumers and the
// typed handlers call it; a transport that runs handlers outside a
// Consumer (such as an asynq server) does too.
func WithEnvelope(ctx context.Context, e *outbox.Envelope) context.Context {
	return context.WithValue(ctx, envelopeKey{}, e)
}

// EnvelopeFrom returns the envelope of the event whose handler received
// ctx: the one the handler was given, or, in a typed handler with
// Registered, the upcast one.
func EnvelopeFrom(ctx context.Context) (*outbox.Envelope, bool) {
	e, ok := ctx.Value(envelopeKey{}).(*outbox.Envelope)
	return e, ok
}
