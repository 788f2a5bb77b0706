package relay

import "context"

type maxAttemptsKey struct{}

// MaxAttemptsOf returns how many attempts the relay gives the event whose
// Publish received ctx (the event's MaxAttempts, else WithMaxAttempts):
// Envelope.Attempt of the last one equals it, and a failure of that
// attempt makes the event dead. ok is false outside a relay's Publish
// (PublishBatch's context is the whole batch's). Package inproc reports it
// to handlers as consume.Delivery.MaxAttempts.
func MaxAttemptsOf(ctx context.Context) (n int, ok bool) {
	n, ok = ctx.Value(maxAttemptsKey{}).(int)
	return n, ok && n > 0
}
