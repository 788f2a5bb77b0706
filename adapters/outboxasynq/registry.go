package outboxasynq

import (
	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// WithRegistry makes Handler check each event with reg before fn runs
// (outbox.Registry.Check): fn receives the event upcast to its latest
// version (Envelope.Version says which), and an event that fails the
// check (unregistered in a strict registry, or a payload that does not
// match its registered type) is archived without a retry, with an error
// wrapping ErrBadPayload, marked outbox.Permanent; fn is not called. With
// HandlerOf, the payload type reg holds for the event must also be the
// handler's T. A nil reg makes Handler panic.
func WithRegistry(reg *outbox.Registry) HandlerOption {
	return handlerOption(func(c *handlerConfig) {
		if reg == nil {
			c.Fail("registry is nil")
			return
		}
		if err := reg.Err(); err != nil {
			c.Fail("registry: %w", err)
		}
		c.registry = reg
	})
}

// registryOf returns the registry among opts (WithRegistry), or nil.
func registryOf(opts []HandlerOption) *outbox.Registry {
	var c handlerConfig
	for _, o := range opts {
		if o != nil {
			o.applyHandler(&c)
		}
	}
	return c.registry
}

// checked returns the envelope fn receives: e upcast and checked with reg
// when reg is set.
func checked(reg *outbox.Registry, e *outbox.Envelope) (*outbox.Envelope, error) {
	if reg == nil {
		return e, nil
	}
	return adapterkit.CheckEnvelope(reg, e, ErrBadPayload)
}
