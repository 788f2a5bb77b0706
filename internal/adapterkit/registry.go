package adapterkit

import (
	"fmt"
	"reflect"

	"github.com/gormoutbox/outbox"
)

// CheckEnvelope returns a copy of e upcast and checked with reg
// (outbox.Registry.Check): the envelope a consumer's handlers receive. A
// failed check gives an error wrapping sentinel (the package's
// ErrBadPayload) and the registry's error, marked outbox.Permanent: the
// event cannot become valid by being retried. e itself is not changed.
func CheckEnvelope(reg *outbox.Registry, e *outbox.Envelope, sentinel error) (*outbox.Envelope, error) {
	c := *e
	if err := reg.Check(&c); err != nil {
		return nil, outbox.Permanent(fmt.Errorf("%w: event %s (%s v%d): %w", sentinel, e.ID, e.Type, e.Version, err))
	}
	return &c, nil
}

// DecodeRegistered is DecodePayload for a typed handler given a registry:
// it checks e with CheckEnvelope, then requires the payload type the
// registry holds for the event's type and (upcast) version, when it holds
// one, to be T, and decodes the upcast payload into a T. It returns the
// upcast envelope with the value. Every failure wraps sentinel and is
// marked outbox.Permanent.
func DecodeRegistered[T any](reg *outbox.Registry, e *outbox.Envelope, sentinel error) (*outbox.Envelope, T, error) {
	var zero T
	c, err := CheckEnvelope(reg, e, sentinel)
	if err != nil {
		return nil, zero, err
	}
	if rt, ok := reg.TypeOf(c.Type, c.Version); ok && rt != reflect.TypeFor[T]() {
		return nil, zero, outbox.Permanent(fmt.Errorf("%w: event %s (%s v%d) is registered with payload %s, the handler takes %s",
			sentinel, c.ID, c.Type, c.Version, rt, reflect.TypeFor[T]()))
	}
	v, err := DecodePayload[T](c, sentinel)
	return c, v, err
}
