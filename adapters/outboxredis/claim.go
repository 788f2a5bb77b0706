package outboxredis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// recoverPending delivers again, one at a time, the messages this consumer
// left pending (failed, excused, or taken before a restart) once idle for
// the retry delay, then adopts with XAUTOCLAIM … JUSTID the messages of
// any consumer of the group idle for the min idle time (they are retried
// here after the retry delay). It reports whether there may be more to
// claim at once, and whether a handler said its transport is unavailable.
func (c *Consumer) recoverPending(ctx context.Context) (more, unavailable bool, err error) {
	more, unavailable, err = c.retryOwn(ctx)
	if err != nil || unavailable || ctx.Err() != nil {
		return more, unavailable, err
	}
	adopted, err := c.adopt(ctx)
	return more || adopted, false, err
}

// adopt makes this consumer the owner of messages of the group idle for
// the min idle time (a consumer that died, or a restart under another
// name), without counting a delivery (JUSTID): retryOwn delivers them, one
// at a time, so that what is never handed to the handler is never
// counted. It reports whether the claim came back full.
func (c *Consumer) adopt(ctx context.Context) (full bool, err error) {
	got, next, err := c.rdb.XAutoClaimJustID(ctx, &redis.XAutoClaimArgs{
		Stream:   c.stream,
		Group:    c.group,
		Consumer: c.name,
		MinIdle:  c.cfg.minIdle,
		Start:    c.cursor,
		Count:    c.cfg.count,
	}).Result()
	if err != nil {
		return false, fmt.Errorf("outboxredis: XAUTOCLAIM %s: %w", c.stream, err)
	}
	c.cursor = next
	if len(got) > 0 {
		c.log.Info("outboxredis: adopted messages idle too long; retrying them here", "messages", len(got), "min_idle", c.cfg.minIdle)
	}
	return int64(len(got)) == c.cfg.count, nil
}

// retryOwn takes this consumer's pending messages that are due, in entry
// order, and claims and handles them one at a time (XCLAIM counts a
// delivery only for the message about to be handled), stopping when a
// handler reports its transport unavailable. A message is due once idle
// for the retry delay, or, in key order, once its predecessor is done.
// The due messages are kept (keeper) from the listing until each is
// handled, so that none is adopted by another consumer while the ones
// before it run, and each is claimed only if it is still this consumer's.
func (c *Consumer) retryOwn(ctx context.Context) (more, unavailable bool, err error) {
	idle := c.cfg.retryDelay
	if len(c.waiting) > 0 {
		idle = min(idle, c.orderPoll())
	}
	listedAt := time.Now()
	pending, err := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: c.stream, Group: c.group, Consumer: c.name, Idle: idle, Start: "-", End: "+", Count: c.cfg.count,
	}).Result()
	if err != nil {
		return false, false, fmt.Errorf("outboxredis: XPENDING %s: %w", c.stream, err)
	}
	waiting := c.waiting
	c.waiting = map[string]bool{}
	due := make([]redis.XPendingExt, 0, len(pending))
	for _, p := range pending {
		if p.Idle >= c.cfg.retryDelay || waiting[p.ID] {
			due = append(due, p)
			// Kept from here on, like a read batch: while the ones
			// before it run, no other consumer adopts it.
			c.keep.hold(listedAt.Add(-p.Idle), p.ID)
		}
	}
	defer func() {
		for _, p := range due {
			c.keep.drop(p.ID)
		}
	}()
	entries, err := c.orderFields(ctx, due)
	if err != nil {
		return false, false, err
	}
	handled := 0
	for _, p := range due {
		if ctx.Err() != nil {
			return false, false, nil
		}
		if m, ok := entries[p.ID]; ok && c.mustWait(ctx, m) {
			c.waiting[p.ID] = true // not claimed: nothing counted
			continue
		}
		claimedAt := time.Now()
		m, excused, ok, err := c.claimOne(ctx, p.ID)
		if err != nil {
			return false, false, err
		}
		if !ok {
			continue
		}
		handled++
		c.keep.hold(claimedAt, p.ID)
		unavailable := c.process(ctx, m, p.RetryCount+1, excused)
		c.keep.drop(p.ID) // settled, or left for its retry delay
		if unavailable {
			return false, true, nil
		}
	}
	// Claim again at once only when every listed message was due and some
	// were handled: waiting messages are checked again after orderPoll.
	return int64(len(pending)) == c.cfg.count && len(due) == len(pending) && handled > 0, false, nil
}

// orderPoll is how soon a message waiting for its predecessor (WithKeyOrder)
// is checked again: 100ms, or the retry delay if shorter.
func (c *Consumer) orderPoll() time.Duration { return min(c.cfg.retryDelay, 100*time.Millisecond) }
