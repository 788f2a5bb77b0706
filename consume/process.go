package consume

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/semconv"
)

// settleTimeout bounds each settlement of a message (Ack, Retry, Dead),
// which runs even after Run's context ended.
const settleTimeout = 5 * time.Second

// process begins one message, runs its handler and settles it. It reports
// whether the rest of the message's key may go on: true after a success
// or a dead message (a dead message does not block its key), and when the
// message is gone to another consumer.
func (c *Consumer) process(ctx context.Context, it item, b *batch) (goOn bool) {
	start, err := it.m.Begin(ctx)
	switch {
	case err != nil:
		c.log.Warn("consumer: cannot begin a message; released", "event_id", it.env.ID, "error", err)
		c.release(ctx, []item{it}, b)
		return false
	case start == Gone:
		b.tally.add(&b.tally.gone, it.env, nil)
		return true
	case start == Wait:
		c.release(ctx, []item{it}, b)
		return false
	}
	d := c.delivery(it.m)
	if d.Attempt > d.MaxAttempts {
		c.dead(ctx, it, d, fmt.Errorf("%w: delivered again after its last counted run (%d of %d) did not end",
			ErrTooManyDeliveries, d.Attempt-1, d.MaxAttempts), b)
		return true
	}
	err = c.call(ctx, it, d)
	return c.settle(ctx, it, d, err, b)
}

// delivery returns m's Delivery with the consumer's defaults filled in.
func (c *Consumer) delivery(m Message) Delivery {
	d := m.Delivery()
	if d.MaxAttempts == 0 {
		d.MaxAttempts = c.cfg.maxDeliveries
	}
	if d.System == "" {
		d.System = c.t.System()
	}
	if d.Destination == "" {
		d.Destination = c.t.Destination()
	}
	d.Attempt = max(d.Attempt, 1)
	return d
}

// settle decides the message's fate from its handler's error (see
// Handler) and tells the transport.
func (c *Consumer) settle(ctx context.Context, it item, d Delivery, err error, b *batch) (goOn bool) {
	delay, snoozed := outbox.SnoozeDelay(err)
	switch {
	case err == nil:
		if aerr := c.settleCall(ctx, it.m.Ack); aerr != nil {
			b.tally.add(&b.tally.unsettled, it.env, fmt.Errorf("ack: %w", aerr))
			return false
		}
		b.tally.add(&b.tally.acked, it.env, nil)
		c.m.count(ctx, outcomeAcked)
		return true
	case outbox.IsPermanent(err):
		c.dead(ctx, it, d, err, b)
		return true
	case outbox.IsUnavailable(err):
		b.stop.Store(true)
		b.unavailable.Store(true)
		c.retry(ctx, it, c.cfg.retryDelay, false, b)
		b.tally.add(&b.tally.unavailable, it.env, err)
	case snoozed:
		c.retry(ctx, it, delay, false, b)
		b.tally.add(&b.tally.snoozed, it.env, err)
	case errors.Is(err, idempotency.ErrInProgress):
		c.retry(ctx, it, c.cfg.retryDelay, false, b)
		b.tally.add(&b.tally.snoozed, it.env, err)
	case d.LastAttempt():
		c.dead(ctx, it, d, fmt.Errorf("%w: attempt %d of %d failed: %w", ErrTooManyDeliveries, d.Attempt, d.MaxAttempts, err), b)
		return true
	default:
		c.retry(ctx, it, c.backoff(d.Attempt), true, b)
		b.tally.add(&b.tally.failed, it.env, err)
	}
	return false
}

// backoff is the delay after the failed counted attempt n: the retry delay
// doubled n-1 times, at most the max retry delay.
func (c *Consumer) backoff(n int) time.Duration {
	d := c.cfg.retryDelay
	for i := 1; i < n && d < c.cfg.maxRetryDelay; i++ {
		d *= 2
	}
	return min(d, c.cfg.maxRetryDelay)
}

// retry hands the message back to the transport, to be delivered again
// after delay.
func (c *Consumer) retry(ctx context.Context, it item, delay time.Duration, counted bool, b *batch) {
	err := c.settleCall(ctx, func(ctx context.Context) error { return it.m.Retry(ctx, delay, counted) })
	if err != nil {
		b.tally.add(&b.tally.unsettled, it.env, fmt.Errorf("retry: %w", err))
	}
	outcome := outcomeReleased
	if counted {
		outcome = outcomeRetried
	}
	c.m.count(ctx, outcome)
}

// dead hands the message to the transport's dead letter, then to the
// OnDead callback.
func (c *Consumer) dead(ctx context.Context, it item, d Delivery, reason error, b *batch) {
	if err := c.settleCall(ctx, func(ctx context.Context) error { return it.m.Dead(ctx, reason) }); err != nil {
		b.tally.add(&b.tally.unsettled, it.env, fmt.Errorf("dead letter: %w", err))
		return
	}
	b.tally.add(&b.tally.dead, it.env, reason)
	c.m.count(ctx, outcomeDead)
	if c.cfg.onDead != nil {
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		c.cfg.onDead(octx, DeadLetter{Envelope: it.env, Delivery: d, Reason: reason})
	}
}

// settleCall runs a settlement under its own deadline, not ended by Run's
// context: what was handled is settled even while Run stops.
func (c *Consumer) settleCall(ctx context.Context, fn func(ctx context.Context) error) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	return fn(sctx)
}

// call runs the handler for it under a consumer span that continues the
// event's trace, with the handler timeout, the envelope and Delivery in
// its context, the registry's check first (WithRegistry), and a panic
// turned into an error (ErrHandlerPanic).
func (c *Consumer) call(ctx context.Context, it item, d Delivery) error {
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.handlerTimeout)
	defer cancel()
	attrs := semconv.ProcessAttributes(d.System, d.Destination, it.env, semconv.DeliveryAttempt.Int(d.Attempt))
	if a, ok := it.m.(Attributer); ok {
		attrs = append(attrs, a.Attributes()...)
	}
	began := time.Now()
	err := adapterkit.Process(hctx, c.tracer, "outbox consume "+it.env.Type, adapterkit.Headers(it.env), attrs,
		func(ctx context.Context) error {
			e := it.env
			if c.cfg.registry != nil {
				var err error
				if e, err = checkEnvelope(c.cfg.registry, e); err != nil {
					return err
				}
			}
			ctx = WithDelivery(WithEnvelope(ctx, e), d)
			return adapterkit.Call(c.log, ErrHandlerPanic, e, func() error { return c.h.Handle(ctx, e) })
		})
	c.m.handled(hctx, time.Since(began), err)
	return err
}

// Attributer is implemented by messages that add attributes of their
// broker to the consumer span (such as a stream sequence or delivery tag).
type Attributer interface {
	Attributes() []attribute.KeyValue
}
