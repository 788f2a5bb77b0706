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

// processBatch handles messages just read (delivered for the first time,
// by a read sent at readAt) one at a time, holding them (keeper) until
// each is settled, so that no other consumer adopts them while they wait.
// It stops early when ctx ends or when a handler reports its transport
// unavailable, which it reports; the messages it did not hand to the
// handler stay pending, their delivery excused. In key order, a message
// whose predecessor is still pending is left pending too (excused) and
// checked again soon. A message another consumer adopted after all is
// left to it.
func (c *Consumer) processBatch(ctx context.Context, msgs []redis.XMessage, readAt time.Time) (unavailable bool) {
	all := ids(msgs)
	c.keep.hold(readAt, all...)
	defer func() {
		for _, id := range all {
			c.keep.drop(id)
		}
	}()
	for i, m := range msgs {
		if ctx.Err() != nil {
			c.excuse(ctx, all[i:]...)
			return false
		}
		if !c.keep.mine(ctx, m.ID) {
			c.log.Info("outboxredis: another consumer adopted a message waiting in this consumer's batch; left to it", "entry_id", m.ID)
			continue
		}
		if c.mustWait(ctx, m) {
			c.excuse(ctx, m.ID)
			c.waiting[m.ID] = true
			continue
		}
		if c.process(ctx, m, 1, 0) {
			c.excuse(ctx, all[i+1:]...)
			return true
		}
		c.keep.drop(m.ID)
	}
	return false
}

// process hands one message to the handler and settles it: acknowledged
// after success, dead-lettered when it is malformed, failed permanently or
// was handled too often, and otherwise left pending for a retry. It
// reports whether the handler said its transport is unavailable.
// deliveries is Redis's delivery count of m, this delivery included;
// excused how many of them do not count towards WithMaxDeliveries.
func (c *Consumer) process(ctx context.Context, m redis.XMessage, deliveries, excused int64) (unavailable bool) {
	env, err := decode(m)
	if err != nil {
		c.dead(ctx, m, nil, deliveries, err)
		return false
	}
	attempt := max(deliveries-excused, 1)
	if attempt > c.cfg.maxDeliveries {
		c.dead(ctx, m, env, deliveries, fmt.Errorf("%w: %d counted runs without success, the most allowed (%d); delivered %d times before",
			ErrTooManyDeliveries, attempt-1, c.cfg.maxDeliveries, deliveries-1))
		return false
	}
	d := Delivery{Stream: c.stream, Group: c.group, Consumer: c.name, EntryID: m.ID,
		Deliveries: deliveries, Attempt: attempt, MaxAttempts: c.cfg.maxDeliveries}
	err = c.handle(ctx, d, env)
	attrs := []any{"event_id", env.ID, "event_type", env.Type, "entry_id", m.ID, "deliveries", deliveries, "attempt", attempt}
	switch {
	case err == nil:
		c.ack(ctx, m.ID, attrs)
	case outbox.IsPermanent(err):
		c.dead(ctx, m, env, deliveries, err)
	case errors.Is(err, idempotency.ErrInProgress):
		// Deliveries that ended with the event in progress elsewhere, or
		// the handler's transport unavailable, say nothing about the
		// message: they do not count.
		c.excuse(ctx, m.ID)
		c.log.Info("outboxredis: event in progress elsewhere; left pending for a retry", append(attrs, "error", err)...)
	case outbox.IsUnavailable(err):
		c.excuse(ctx, m.ID)
		c.log.Warn("outboxredis: handler's transport unavailable; left pending for a retry", append(attrs, "error", err)...)
	default:
		c.log.Warn("outboxredis: handler failed; left pending for a retry", append(attrs, "error", err, "retry_in", c.cfg.retryDelay)...)
	}
	return outbox.IsUnavailable(err)
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

// ack acknowledges a message, forgets its excused deliveries, and reports
// whether Redis took it. A failed acknowledgement leaves the message
// pending: it is delivered again, and idempotent handlers skip it. A
// message that another consumer may have adopted while its handler ran
// (see keeper.fresh) is acknowledged only if it is still this consumer's:
// the other consumer runs it, and acknowledges it when done, so that in
// key order its successor waits for that run.
func (c *Consumer) ack(ctx context.Context, id string, attrs []any) bool {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	if c.keep != nil && !c.keep.fresh(id) {
		return c.ackOwn(actx, id, attrs)
	}
	pipe := c.rdb.Pipeline()
	xack := pipe.XAck(actx, c.stream, c.group, id)
	pipe.HDel(actx, c.excusedKey, id)
	_, _ = pipe.Exec(actx)
	if err := xack.Err(); err != nil {
		c.log.Warn("outboxredis: XACK failed; the message will be delivered again", append(attrs, "error", err)...)
		return false
	}
	return true
}

// ackOwn acknowledges id if this consumer still owns it (ackOwnScript).
func (c *Consumer) ackOwn(ctx context.Context, id string, attrs []any) bool {
	n, err := ackOwnScript.Run(ctx, c.rdb, []string{c.stream, c.excusedKey}, c.group, c.name, id).Int()
	switch {
	case err != nil:
		c.log.Warn("outboxredis: XACK failed; the message will be delivered again", append(attrs, "error", err)...)
		return false
	case n == 0:
		c.log.Warn("outboxredis: another consumer adopted the message while its handler ran here; it acknowledges it", attrs...)
		return false
	}
	return true
}
