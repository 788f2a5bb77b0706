package adapterkit

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/gormoutbox/outbox"
)

// DecodePayload decodes e's JSON payload into a T. A payload that does
// not decode gives an error wrapping sentinel (the package's
// ErrBadPayload), marked outbox.Permanent: retrying cannot fix it.
func DecodePayload[T any](e *outbox.Envelope, sentinel error) (T, error) {
	var v T
	if err := json.Unmarshal(e.Payload, &v); err != nil {
		return v, outbox.Permanent(fmt.Errorf("%w: event %s (%s) into %s: %w", sentinel, e.ID, e.Type, reflect.TypeFor[T](), err))
	}
	return v, nil
}

type envelopeKey struct{}

// WithEnvelope returns ctx carrying e, for EnvelopeFrom.
func WithEnvelope(ctx context.Context, e *outbox.Envelope) context.Context {
	return context.WithValue(ctx, envelopeKey{}, e)
}

// EnvelopeFrom returns the envelope WithEnvelope put in ctx.
func EnvelopeFrom(ctx context.Context) (*outbox.Envelope, bool) {
	e, ok := ctx.Value(envelopeKey{}).(*outbox.Envelope)
	return e, ok
}
