package outboxredis

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// recoverPending delivers again the messages this consumer left pending
// (failed, or taken before a restart) once idle for the retry delay, then
// claims with XAUTOCLAIM the messages of any consumer of the group idle for
// the min idle time, and handles them. It reports whether there may be
// more to claim at once (a claim came back full), and whether a handler said its transport is
// unavailable.
func (c *Consumer) recoverPending(ctx context.Context) (more, unavailable bool, err error) {
	more, unavailable, err = c.retryOwn(ctx)
	if err != nil || unavailable || ctx.Err() != nil {
		return more, unavailable, err
	}
	msgs, next, err := c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream:   c.stream,
		Group:    c.group,
		Consumer: c.name,
		MinIdle:  c.cfg.minIdle,
		Start:    c.cursor,
		Count:    c.cfg.count,
	}).Result()
	if err != nil {
		return more, false, fmt.Errorf("outboxredis: XAUTOCLAIM %s: %w", c.stream, err)
	}
	c.cursor = next
	// A full claim may have left more behind; otherwise the cursor goes on
	// scanning at the next claim interval.
	more = more || int64(len(msgs)) == c.cfg.count
	if len(msgs) == 0 {
		return more, false, nil
	}
	c.log.Info("outboxredis: claimed messages idle too long", "messages", len(msgs), "min_idle", c.cfg.minIdle)
	counts, err := c.deliveryCounts(ctx, msgs)
	if err != nil {
		return more, false, err
	}
	return more, c.processAll(ctx, msgs, counts), nil
}

// retryOwn takes back this consumer's messages pending for the retry delay
// (XPENDING … IDLE, then XCLAIM, which bumps their delivery counts) and
// handles them.
func (c *Consumer) retryOwn(ctx context.Context) (more, unavailable bool, err error) {
	pending, err := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream:   c.stream,
		Group:    c.group,
		Idle:     c.cfg.retryDelay,
		Start:    "-",
		End:      "+",
		Count:    c.cfg.count,
		Consumer: c.name,
	}).Result()
	if err != nil {
		return false, false, fmt.Errorf("outboxredis: XPENDING %s: %w", c.stream, err)
	}
	if len(pending) == 0 {
		return false, false, nil
	}
	ids := make([]string, len(pending))
	counts := make(map[string]int64, len(pending))
	for i, p := range pending {
		ids[i] = p.ID
		counts[p.ID] = p.RetryCount + 1 // XCLAIM counts this delivery
	}
	msgs, err := c.rdb.XClaim(ctx, &redis.XClaimArgs{
		Stream:   c.stream,
		Group:    c.group,
		Consumer: c.name,
		MinIdle:  c.cfg.retryDelay,
		Messages: ids,
	}).Result()
	if err != nil {
		return false, false, fmt.Errorf("outboxredis: XCLAIM %s: %w", c.stream, err)
	}
	return int64(len(pending)) == c.cfg.count, c.processAll(ctx, msgs, counts), nil
}

// deliveryCounts reads the delivery count of each claimed message from the
// pending entries list, in one pipeline (XAUTOCLAIM does not return them).
func (c *Consumer) deliveryCounts(ctx context.Context, msgs []redis.XMessage) (map[string]int64, error) {
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.XPendingExtCmd, len(msgs))
	for i, m := range msgs {
		cmds[i] = pipe.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: c.stream, Group: c.group, Start: m.ID, End: m.ID, Count: 1,
		})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("outboxredis: XPENDING %s: %w", c.stream, err)
	}
	counts := make(map[string]int64, len(msgs))
	for _, cmd := range cmds {
		for _, p := range cmd.Val() {
			counts[p.ID] = p.RetryCount
		}
	}
	return counts, nil
}
