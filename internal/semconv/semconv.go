// Package semconv names the span attributes of this module, in one
// place: OpenTelemetry's semantic conventions for messaging (messaging.*)
// and CloudEvents (cloudevents.*), and the outbox's own (outbox.*) where
// no convention exists. The adapters' consumer spans use them; the relay's
// spans should too.
package semconv

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/gormoutbox/outbox"
)

// Span attribute names, one set for every adapter and the relay:
// OpenTelemetry's semantic conventions for messaging (messaging.*) and
// CloudEvents (cloudevents.*), plus the relay's attempt count, which has
// no convention.
const (
	MessagingSystem = attribute.Key("messaging.system")
	OperationType   = attribute.Key("messaging.operation.type")
	Destination     = attribute.Key("messaging.destination.name")
	ConsumerGroup   = attribute.Key("messaging.consumer.group.name")
	MessageID       = attribute.Key("messaging.message.id")
	EventID         = attribute.Key("cloudevents.event_id")
	EventType       = attribute.Key("cloudevents.event_type")
	EventSource     = attribute.Key("cloudevents.event_source")
	EventAttempt    = attribute.Key("outbox.event.attempt")
	// DeliveryAttempt is a consumer's count of its counted runs of a
	// message (consume.Delivery.Attempt), not the relay's.
	DeliveryAttempt = attribute.Key("outbox.delivery.attempt")
)

// The attributes of one messaging system, named by its semantic
// conventions where they have one.
const (
	RedisDeliveryCount  = attribute.Key("messaging.redis.delivery_count")
	NATSStreamSequence  = attribute.Key("messaging.nats.stream_sequence")
	NATSNumDelivered    = attribute.Key("messaging.nats.num_delivered")
	RabbitMQRoutingKey  = attribute.Key("messaging.rabbitmq.destination.routing_key")
	RabbitMQDeliveryTag = attribute.Key("messaging.rabbitmq.message.delivery_tag")
	AsynqTaskRetryCount = attribute.Key("asynq.task.retry_count")
)

// EventAttributes are the attributes of the event e: its id, type and
// source (CloudEvents conventions) and the relay's attempt.
func EventAttributes(e *outbox.Envelope) []attribute.KeyValue {
	return []attribute.KeyValue{
		EventID.String(e.ID),
		EventType.String(e.Type),
		EventSource.String(e.Source),
		EventAttempt.Int(e.Attempt),
	}
}

// ProcessAttributes are the attributes of a consumer span that processes
// e, taken from destination by the messaging system system: the
// messaging attributes, the event's (EventAttributes), then extra (the
// system's own, such as a delivery count).
func ProcessAttributes(system, destination string, e *outbox.Envelope, extra ...attribute.KeyValue) []attribute.KeyValue {
	attrs := append([]attribute.KeyValue{
		MessagingSystem.String(system),
		OperationType.String("process"),
		Destination.String(destination),
	}, EventAttributes(e)...)
	return append(attrs, extra...)
}
