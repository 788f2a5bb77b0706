package consume

import "context"

// Delivery describes the run of a handler: which attempt it is and what
// the broker knows of the message. It is the same type on every broker;
// what only one broker has is in Details.
type Delivery struct {
	// System names the broker, as OpenTelemetry's messaging.system does:
	// "redis", "rabbitmq", "nats", "kafka", "asynq", or "outbox" for
	// handlers run by the relay itself (package inproc).
	System string
	// Destination is where the message was read: the stream, queue,
	// durable consumer's stream or topic.
	Destination string
	// Attempt counts, from 1, the runs of the handler for this message that
	// count towards MaxAttempts, this one included: runs that ended in
	// outbox.Unavailable, outbox.Snooze or idempotency.ErrInProgress, and
	// deliveries that never reached the handler, are not counted. How far
	// the count survives a restart depends on the broker (see its
	// package's documentation). It is the consumer's count, not the
	// relay's: outbox.Envelope.Attempt counts the relay's attempts to
	// publish the event.
	Attempt int
	// MaxAttempts is the consumer's WithMaxDeliveries: if the run whose
	// Attempt equals it fails, the message is dead.
	MaxAttempts int
	// Details is what the broker says of the message, a value of its
	// adapter's type (such as outboxredis.Entry or outboxnats.Message),
	// or nil.
	Details any
}

// LastAttempt reports whether a failure of this run makes the message
// dead (an error other than outbox.Unavailable, outbox.Snooze or
// idempotency.ErrInProgress).
func (d Delivery) LastAttempt() bool { return d.MaxAttempts > 0 && d.Attempt >= d.MaxAttempts }

type deliveryKey struct{}

// WithDelivery returns ctx carrying d, for DeliveryFrom. Consumers call it
// before a handler runs; so do transports that run handlers outside a
// Consumer.
func WithDelivery(ctx context.Context, d Delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

// DeliveryFrom returns the Delivery of the message whose handler received
// ctx; ok is false outside a handler.
func DeliveryFrom(ctx context.Context) (Delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(Delivery)
	return d, ok
}
