package outboxamqp

import (
	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// TypedOption configures HandlerOf and TxHandlerOf.
type TypedOption func(*typedConfig)

type typedConfig struct{ registry *outbox.Registry }

// Registered makes a typed handler use reg: the event is upcast and
// checked (outbox.Registry.Check), the payload type reg holds for its type
// and version must be the handler's T, and the handler receives the
// upcast payload (and, in its context, the upcast envelope). A failure
// wraps ErrBadPayload and is marked outbox.Permanent (the message is dead
// at once); fn is not called. A nil reg is ignored.
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
