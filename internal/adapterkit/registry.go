package adapterkit

import (
	"fmt"

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
