package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// maxPause bounds the wait after a handler reported its transport
// unavailable.
const maxPause = 30 * time.Second

// process hands one message to the handler and settles it: acknowledged
// after success, rejected without requeue (dead) when it is malformed,
// failed permanently or failed too often, and otherwise requeued after a
// delay.
func (c *Consumer) process(ctx context.Context, m amqp.Delivery) {
	env, err := outbox.DecodeEnvelope(m.Body)
	if err != nil {
		c.dead(ctx, m, nil, fmt.Errorf("%w: message %q (delivery %d): %w", ErrMalformed, m.MessageId, m.DeliveryTag, err))
		return
	}
	d := Delivery{
		Queue: c.queue, ConsumerTag: m.ConsumerTag, DeliveryTag: m.DeliveryTag,
		Exchange: m.Exchange, RoutingKey: m.RoutingKey, Redelivered: m.Redelivered,
		DeliveryCount: deliveryCount(m.Headers), Attempt: c.failures.get(env.ID) + 1,
		MaxAttempts: c.cfg.maxDeliveries, Headers: m.Headers,
	}
	err = c.handle(ctx, d, env)
	attrs := []any{"event_id", env.ID, "event_type", env.Type, "delivery_tag", m.DeliveryTag, "attempt", d.Attempt}
	switch {
	case err == nil:
		c.pause.Store(0)
		c.failures.forget(env.ID)
		if err := m.Ack(false); err != nil {
			c.log.Warn("outboxamqp: ack failed; the message will be delivered again", append(attrs, "error", err)...)
		}
	case outbox.IsPermanent(err):
		c.dead(ctx, m, env, err)
	case errors.Is(err, idempotency.ErrInProgress):
		// Runs that ended with the event in progress elsewhere, or the
		// handler's transport unavailable, say nothing about the message:
		// they do not count.
		c.log.Info("outboxamqp: event in progress elsewhere; requeued", append(attrs, "error", err, "retry_in", c.cfg.retryDelay)...)
		c.requeue(ctx, m, c.cfg.retryDelay, attrs)
	case outbox.IsUnavailable(err):
		wait := c.nextPause()
		c.log.Warn("outboxamqp: handler's transport unavailable; requeued", append(attrs, "error", err, "retry_in", wait)...)
		c.requeue(ctx, m, wait, attrs)
	default:
		if n := c.failures.add(env.ID); n >= c.cfg.maxDeliveries {
			c.dead(ctx, m, env, fmt.Errorf("%w: %d failed runs, the most allowed: %w", ErrTooManyDeliveries, n, err))
			return
		}
		c.log.Warn("outboxamqp: handler failed; requeued", append(attrs, "error", err, "retry_in", c.cfg.retryDelay)...)
		c.requeue(ctx, m, c.cfg.retryDelay, attrs)
	}
}

// requeue puts m back in its queue after wait (less if ctx ends first).
func (c *Consumer) requeue(ctx context.Context, m amqp.Delivery, wait time.Duration, attrs []any) {
	adapterkit.Sleep(ctx, wait)
	if err := m.Nack(false, true); err != nil {
		c.log.Warn("outboxamqp: requeue failed; the broker requeues the message when the channel closes", append(attrs, "error", err)...)
	}
}

// nextPause doubles the wait after an unavailable transport, from the
// retry delay up to maxPause.
func (c *Consumer) nextPause() time.Duration {
	for {
		old := c.pause.Load()
		next := adapterkit.NextPause(time.Duration(old), c.cfg.retryDelay, maxPause)
		if c.pause.CompareAndSwap(old, int64(next)) {
			return next
		}
	}
}

// dead rejects m without requeue (the broker dead-letters it if its queue
// has a dead-letter exchange), logs it at error level and calls OnDead.
func (c *Consumer) dead(ctx context.Context, m amqp.Delivery, env *outbox.Envelope, reason error) {
	attrs := []any{"message_id", m.MessageId, "delivery_tag", m.DeliveryTag, "reason", reason}
	if env != nil {
		attrs = append(attrs, "event_id", env.ID, "event_type", env.Type)
		c.failures.forget(env.ID)
	}
	c.log.Error("outboxamqp: message dead; rejected without requeue", attrs...)
	if err := m.Nack(false, false); err != nil {
		c.log.Warn("outboxamqp: reject failed; the message will be delivered again", append(attrs, "error", err)...)
		return
	}
	if c.cfg.onDead != nil {
		c.cfg.onDead(context.WithoutCancel(ctx), DeadMessage{Queue: c.queue, Message: m, Envelope: env, Reason: reason})
	}
}

// deliveryCount reads the x-delivery-count header of quorum queues.
func deliveryCount(h amqp.Table) int64 {
	switch v := h["x-delivery-count"].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int16:
		return int64(v)
	case int8:
		return int64(v)
	case int:
		return int64(v)
	case uint8:
		return int64(v)
	case uint16:
		return int64(v)
	case uint32:
		return int64(v)
	}
	return 0
}

// maxTracked bounds the events whose failures a consumer remembers; past
// it, the counts start afresh (an event requeued to another consumer is
// never forgotten otherwise).
const maxTracked = 10000

// failureCounts counts the failed runs per event id.
type failureCounts struct {
	mu sync.Mutex
	m  map[string]int
}

func (f *failureCounts) get(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[id]
}

func (f *failureCounts) add(id string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[id]; !ok && len(f.m) >= maxTracked {
		clear(f.m)
	}
	f.m[id]++
	return f.m[id]
}

func (f *failureCounts) forget(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, id)
}
