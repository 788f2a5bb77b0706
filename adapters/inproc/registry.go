package inproc

import (
	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// WithRegistry makes the Mux check each event with reg before its
// handlers run (outbox.Registry.Check): handlers receive the event upcast
// to its latest version (Envelope.Version says which), and an event that
// fails the check (unregistered in a strict registry, or a payload that no
// longer matches its registered type) runs no handler and fails with an
// error wrapping ErrBadPayload, marked outbox.Permanent, so that the relay
// marks it dead at once with the reason.
func WithRegistry(reg *outbox.Registry) Option {
	return func(c *config) {
		if reg == nil {
			c.Fail("registry is nil")
			return
		}
		if err := reg.Err(); err != nil {
			c.Fail("registry: %w", err)
		}
		c.registry = reg
	}
}

// TypedOption configures HandlerOf and TxHandlerOf.
type TypedOption func(*typedConfig)

type typedConfig struct{ registry *outbox.Registry }

// Registered makes a typed handler use reg: the event is upcast and
// checked (outbox.Registry.Check), the payload type reg holds for its type
// and version must be the handler's T, and the handler receives the
// upcast payload (and, in its context, the upcast envelope). A failure
// wraps ErrBadPayload and is marked outbox.Permanent; fn is not called. A
// nil reg is ignored.
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

// decodeWith decodes e's payload into a T, through the registry when the
// options give one; it returns the envelope the handler sees.
func decodeWith[T any](c typedConfig, e *outbox.Envelope) (*outbox.Envelope, T, error) {
	if c.registry == nil {
		v, err := decodePayload[T](e)
		return e, v, err
	}
	return adapterkit.DecodeRegistered[T](c.registry, e, ErrBadPayload)
}
