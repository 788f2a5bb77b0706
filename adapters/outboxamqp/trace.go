package outboxamqp

import (
	"context"
	"errors"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/semconv"
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
	attrs := semconv.ProcessAttributes("rabbitmq", d.Queue, e,
		semconv.MessageID.String(e.ID),
		semconv.RabbitMQRoutingKey.String(d.RoutingKey),
		semconv.RabbitMQDeliveryTag.Int64(int64(d.DeliveryTag)))
	return adapterkit.Process(hctx, c.tracer, "process "+d.Queue, adapterkit.Headers(e), attrs, func(ctx context.Context) error {
		return c.call(withDelivery(ctx, d), e)
	})
}

// call runs the handler, turning a panic into an error.
func (c *Consumer) call(ctx context.Context, e *outbox.Envelope) error {
	return adapterkit.Call(c.log, errPanic, e, func() error { return c.h.Handle(ctx, e) })
}
