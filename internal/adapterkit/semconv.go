package adapterkit

import (
	"go.opentelemetry.io/otel/attribute"

	"github.com/gormoutbox/outbox"
)

// Span attribute names, one set for every adapter: OpenTelemetry's
// semantic conventions for messaging (messaging.*) and CloudEvents
// (cloudevents.*), plus the relay's attempt count, which has no
// convention.
const (
	AttrMessagingSystem = attribute.Key("messaging.system")
	AttrOperationType   = attribute.Key("messaging.operation.type")
	AttrDestination     = attribute.Key("messaging.destination.name")
	AttrConsumerGroup   = attribute.Key("messaging.consumer.group.name")
	AttrMessageID       = attribute.Key("messaging.message.id")
	AttrEventID         = attribute.Key("cloudevents.event_id")
	AttrEventType       = attribute.Key("cloudevents.event_type")
	AttrEventSource     = attribute.Key("cloudevents.event_source")
	AttrEventAttempt    = attribute.Key("outbox.event.attempt")
)

// EventAttributes are the attributes of the event e: its id, type and
// source (CloudEvents conventions) and the relay's attempt.
func EventAttributes(e *outbox.Envelope) []attribute.KeyValue {
	return []attribute.KeyValue{
		AttrEventID.String(e.ID),
		AttrEventType.String(e.Type),
		AttrEventSource.String(e.Source),
		AttrEventAttempt.Int(e.Attempt),
	}
}

// ProcessAttributes are the attributes of a consumer span that processes
// e, taken from destination by the messaging system system: the
// messaging attributes, the event's (EventAttributes), then extra (the
// system's own, such as a delivery count).
func ProcessAttributes(system, destination string, e *outbox.Envelope, extra ...attribute.KeyValue) []attribute.KeyValue {
	attrs := append([]attribute.KeyValue{
		AttrMessagingSystem.String(system),
		AttrOperationType.String("process"),
		AttrDestination.String(destination),
	}, EventAttributes(e)...)
	return append(attrs, extra...)
}
