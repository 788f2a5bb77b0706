package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

// process hands one message to the handler and settles it: acknowledged
// after success, dead when it is malformed, failed permanently or failed
// its last attempt, and otherwise handed back (NakWithDelay) for a later
// delivery. It reports whether the handler said its transport is
// unavailable.
func (c *Consumer) process(ctx context.Context, msg jetstream.Msg) (unavailable bool) {
	md, err := msg.Metadata()
	if err != nil {
		// Not a JetStream delivery: there is nothing to acknowledge.
		c.log.Error("outboxnats: not a JetStream message; ignored", "subject", msg.Subject(), "error", err)
		return false
	}
	seq := md.Sequence.Stream
	d := Delivery{
		Stream: md.Stream, Consumer: md.Consumer, Subject: msg.Subject(),
		StreamSeq: seq, ConsumerSeq: md.Sequence.Consumer,
		NumDelivered: md.NumDelivered, NumPending: md.NumPending, Timestamp: md.Timestamp,
		Header:      msg.Headers(),
		Attempt:     max(int(md.NumDelivered)-c.excused[seq], 1),
		MaxAttempts: c.cfg.maxDeliveries,
	}
	env, err := outbox.DecodeEnvelope(msg.Data())
	if err != nil {
		c.dead(ctx, msg, d, nil, fmt.Errorf("%w: stream sequence %d: %w", ErrMalformed, seq, err))
		return false
	}
	if d.Attempt > d.MaxAttempts {
		c.dead(ctx, msg, d, env, fmt.Errorf("%w: delivered %d times, %d of them counted, the most allowed being %d (its handler runs did not end)",
			ErrTooManyDeliveries, d.NumDelivered, d.Attempt, d.MaxAttempts))
		return false
	}
	err = c.handle(ctx, d, env)
	attrs := []any{"event_id", env.ID, "event_type", env.Type, "stream_seq", seq, "num_delivered", d.NumDelivered, "attempt", d.Attempt}
	delay, snoozed := outbox.SnoozeDelay(err)
	switch {
	case err == nil:
		c.ack(msg, seq, attrs)
	case outbox.IsPermanent(err):
		c.dead(ctx, msg, d, env, err)
	case errors.Is(err, idempotency.ErrInProgress):
		// Runs that found the event in progress elsewhere, or the
		// handler's transport down, say nothing of the message: they do
		// not count.
		c.log.Info("outboxnats: event in progress elsewhere; delivered again later", append(attrs, "error", err)...)
		c.handBack(msg, c.cfg.retryDelay)
	case outbox.IsUnavailable(err):
		c.log.Warn("outboxnats: handler's transport unavailable; delivered again later", append(attrs, "error", err)...)
		c.handBack(msg, c.cfg.retryDelay)
		return true
	case snoozed:
		c.log.Info("outboxnats: handler snoozed the event", append(attrs, "error", err, "retry_in", delay)...)
		c.handBack(msg, delay)
	case d.LastAttempt():
		c.dead(ctx, msg, d, env, fmt.Errorf("%w: attempt %d of %d failed: %w", ErrTooManyDeliveries, d.Attempt, d.MaxAttempts, err))
	default:
		delay := c.backoff(d.Attempt)
		c.log.Warn("outboxnats: handler failed; delivered again later", append(attrs, "error", err, "retry_in", delay)...)
		if err := msg.NakWithDelay(delay); err != nil {
			c.log.Warn("outboxnats: NAK failed; delivered again after the ack wait", append(attrs, "error", err)...)
		}
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

// ack acknowledges a message and forgets its excused deliveries. A lost
// acknowledgement has the message delivered again after the ack wait:
// idempotent handlers skip it.
func (c *Consumer) ack(msg jetstream.Msg, seq uint64, attrs []any) {
	delete(c.excused, seq)
	if err := msg.Ack(); err != nil {
		c.log.Warn("outboxnats: ack failed; the message will be delivered again", append(attrs, "error", err)...)
	}
}

// handBack has msg delivered again after delay (NakWithDelay), and excuses
// that delivery: it does not count towards WithMaxDeliveries.
func (c *Consumer) handBack(msg jetstream.Msg, delay time.Duration) {
	if md, err := msg.Metadata(); err == nil {
		if len(c.excused) >= maxExcused {
			clear(c.excused)
		}
		c.excused[md.Sequence.Stream]++
	}
	var err error
	if delay > 0 {
		err = msg.NakWithDelay(delay)
	} else {
		err = msg.Nak()
	}
	if err != nil {
		c.log.Warn("outboxnats: NAK failed; delivered again after the ack wait", "subject", msg.Subject(), "error", err)
	}
}
