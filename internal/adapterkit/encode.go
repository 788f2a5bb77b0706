package adapterkit

import (
	"fmt"

	"github.com/gormoutbox/outbox"
)

// EncodeEnvelope returns e as a publisher sends it: its CloudEvents JSON,
// with source as its source when it has none (e itself is not modified).
// An encoding error wraps sentinel (the adapter's invalid-message error)
// and is marked outbox.Permanent.
func EncodeEnvelope(e *outbox.Envelope, source string, sentinel error) ([]byte, error) {
	env := *e
	if env.Source == "" {
		env.Source = source
	}
	b, err := env.MarshalJSON()
	if err != nil {
		return nil, outbox.Permanent(fmt.Errorf("%w: encoding event %s: %w", sentinel, e.ID, err))
	}
	return b, nil
}
