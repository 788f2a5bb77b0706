package outboxredis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

// opTimeout bounds the acknowledgements and dead-letter appends made for a
// message, which run even after Run's context ended.
const opTimeout = 5 * time.Second

// processAll handles msgs one at a time, stopping early when ctx ends
// (the rest stay pending) or when a handler reports its transport
// unavailable, which it reports. deliveries gives each message's delivery
// count; a message it does not list is delivered for the first time.
func (c *Consumer) processAll(ctx context.Context, msgs []redis.XMessage, deliveries map[string]int64) (unavailable bool) {
	for _, m := range msgs {
		if ctx.Err() != nil {
			return false
		}
		n, ok := deliveries[m.ID]
		if !ok {
			n = 1
		}
		if err := c.process(ctx, m, n); outbox.IsUnavailable(err) {
			return true
		}
	}
	return false
}

// process handles one message and settles it: acknowledged after success,
// dead-lettered when it is malformed, failed permanently or was delivered
// too often, and otherwise left pending for a retry. It returns the
// handler's error.
func (c *Consumer) process(ctx context.Context, m redis.XMessage, deliveries int64) error {
	env, err := decode(m)
	if err != nil {
		c.dead(ctx, m, nil, deliveries, err)
		return nil
	}
	// Deliveries that ended with the handler's transport unavailable, or
	// the event in progress elsewhere, say nothing about the message: they
	// do not count towards the limit (as far as this process knows).
	if counted := deliveries - c.soft[m.ID]; counted > c.cfg.maxDeliveries {
		delete(c.soft, m.ID)
		c.dead(ctx, m, env, deliveries, fmt.Errorf("%w: delivered %d times, at most %d are handled",
			ErrTooManyDeliveries, counted, c.cfg.maxDeliveries))
		return nil
	}
	d := Delivery{Stream: c.stream, Group: c.group, Consumer: c.name, EntryID: m.ID, Deliveries: deliveries}
	err = c.handle(ctx, d, env)
	attrs := []any{"event_id", env.ID, "event_type", env.Type, "entry_id", m.ID, "deliveries", deliveries}
	switch {
	case err == nil:
		delete(c.soft, m.ID)
		c.ack(ctx, m.ID, attrs)
	case outbox.IsPermanent(err):
		delete(c.soft, m.ID)
		c.dead(ctx, m, env, deliveries, err)
	case errors.Is(err, idempotency.ErrInProgress):
		c.soft[m.ID]++
		c.log.Info("outboxredis: event in progress elsewhere; left pending for a retry", append(attrs, "error", err)...)
	case outbox.IsUnavailable(err):
		c.soft[m.ID]++
		c.log.Warn("outboxredis: handler's transport unavailable; left pending for a retry", append(attrs, "error", err)...)
	default:
		c.log.Warn("outboxredis: handler failed; left pending for a retry", append(attrs, "error", err, "retry_in", c.cfg.retryDelay)...)
	}
	return err
}

// decode reads the envelope of a stream entry.
func decode(m redis.XMessage) (*outbox.Envelope, error) {
	raw, ok := m.Values[FieldEvent].(string)
	if !ok {
		return nil, fmt.Errorf("%w: entry %s has no %q field", ErrMalformed, m.ID, FieldEvent)
	}
	env, err := outbox.DecodeEnvelope([]byte(raw))
	if err != nil {
		return nil, fmt.Errorf("%w: entry %s: %w", ErrMalformed, m.ID, err)
	}
	return env, nil
}

// ack acknowledges a message and reports whether Redis took it. A failed
// acknowledgement leaves the message pending: it is delivered again, and
// idempotent handlers skip it.
func (c *Consumer) ack(ctx context.Context, id string, attrs []any) bool {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if err := c.rdb.XAck(actx, c.stream, c.group, id).Err(); err != nil {
		c.log.Warn("outboxredis: XACK failed; the message will be delivered again", append(attrs, "error", err)...)
		return false
	}
	return true
}
