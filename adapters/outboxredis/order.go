package outboxredis

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// mustWait reports, in key order, whether m must wait because the entry
// before it of the same partition key (its FieldAfter, written by a
// publisher WithKeyChain) is still pending in the group: being handled,
// failed and waiting for a retry, or waiting itself. A predecessor that
// was acknowledged, dead-lettered, or never delivered to this group (it
// predates the group's start) is done. When Redis cannot tell, m waits.
func (t *transport) mustWait(ctx context.Context, m *message) bool {
	if !t.cfg.keyOrder {
		return false
	}
	after, _ := m.values[FieldAfter].(string)
	if after == "" || !entryID.MatchString(after) {
		return false // no predecessor
	}
	// Redis's pending list is asked every time, not a memory of the
	// entries this consumer acknowledged: it alone says whether the
	// predecessor is done, whichever consumer ran it.
	p, err := t.rdb.XPendingExt(ctx, &redis.XPendingExtArgs{
		Stream: t.stream, Group: t.group, Start: after, End: after, Count: 1,
	}).Result()
	if err != nil {
		t.log.Warn("outboxredis: cannot check the predecessor of a message; it waits", "entry_id", m.id, "after", after, "error", err)
		return true
	}
	if len(p) > 0 {
		t.log.Debug("outboxredis: message waits for its predecessor", "entry_id", m.id, "after", after, "predecessor_consumer", p[0].Consumer)
		return true
	}
	return false
}
