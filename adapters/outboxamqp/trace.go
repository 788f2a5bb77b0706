package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox"
)

// errPanic is wrapped by the error of a handler that panicked.
var errPanic = errors.New("outboxamqp: handler panicked")

// handle runs the handler for e under a consumer span that continues the
// trace of the event's traceparent and tracestate headers. The handler's
// context carries the Delivery and ends after the handler timeout, not
// with ctx.
func (c *Consumer) handle(ctx context.Context, d Delivery, e *outbox.Envelope) error {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.handlerTimeout)
	defer cancel()
	hctx = c.prop.Extract(hctx, propagation.MapCarrier(e.Headers))
	hctx, span := c.tracer.Start(hctx, "process "+d.Queue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "rabbitmq"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", d.Queue),
			attribute.String("messaging.message.id", e.ID),
			attribute.String("messaging.rabbitmq.destination.routing_key", d.RoutingKey),
			attribute.Int64("messaging.rabbitmq.message.delivery_tag", int64(d.DeliveryTag)),
			attribute.String("cloudevents.event_id", e.ID),
			attribute.String("cloudevents.event_type", e.Type),
			attribute.String("cloudevents.event_source", e.Source),
			attribute.Int("outbox.attempt", e.Attempt),
		))
	defer span.End()
	err := c.call(withDelivery(hctx, d), e)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// call runs the handler, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, e *outbox.Envelope) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanic, p)
			c.log.Error("outboxamqp: handler panicked", "event_id", e.ID, "event_type", e.Type, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return c.h.Handle(ctx, e)
}
