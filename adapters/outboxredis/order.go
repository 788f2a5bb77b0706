package outboxredis

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// orderFields reads, in key order, the entries of the pending messages
// listed (XRANGE, which does not count a delivery), so that their
// predecessors can be checked before they are claimed. Outside key order
// it reads nothing.
func (c *Consumer) orderFields(ctx context.Context, pending []redis.XPendingExt) (map[string]redis.XMessage, error) {
	if !c.cfg.keyOrder || len(pending) == 0 {
		return nil, nil
	}
	pipe := c.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(pending))
	for i, p := range pending {
		cmds[i] = pipe.XRange(ctx, c.stream, p.ID, p.ID)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("outboxredis: XRANGE %s: %w", c.stream, err)
	}
	out := make(map[string]redis.XMessage, len(pending))
	for _, cmd := range cmds {
		for _, m := range cmd.Val() {
			out[m.ID] = m
		}
	}
	return out, nil
}

// mustWait reports, in key order, whether m must wait because the entry
// before it of the same partition key (its FieldAfter, written by a
// publisher WithKeyChain) is still pending in the group: being handled,
// failed and waiting for a retry, or waiting itself. A predecessor that
// was acknowledged, dead-lettered, or never delivered to this group (it
// predates the group's start) is done. When Redis cannot tell, m waits.
func (c *Consumer) mustWait(ctx context.Context, m redis.XMessage) bool {
	if !c.cfg.keyOrder {
		return false
	}
	after, _ := m.Values[FieldAfter].(string)
	if after == "" || !entryID.MatchString(after) {
		return false // no predecessor
	}
	// Redis's pending list is asked every time, not a memory of the
	// entries this consumer acknowledged: it alone says whether the
	// predecessor is done, whichever consumer ran it.
	p, err := c.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: c.stream, Group: c.group, Start: after, End: after, Count: 1,
	}).Result()
	if err != nil {
		c.log.Warn("outboxredis: cannot check the predecessor of a message; it waits", "entry_id", m.ID, "after", after, "error", err)
		return true
	}
	if len(p) > 0 {
		c.log.Debug("outboxredis: message waits for its predecessor", "entry_id", m.ID, "after", after, "predecessor_consumer", p[0].Consumer)
		return true
	}
	return false
}
