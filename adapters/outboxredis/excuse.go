package outboxredis

import (
	"context"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Excused deliveries.
//
// Redis counts every delivery of an entry to a group (XREADGROUP, XCLAIM,
// XAUTOCLAIM without JUSTID), including deliveries that never reached the
// handler (the rest of a batch when a handler reported its transport
// unavailable, or Run's context ended) and deliveries whose handler could
// not run for reasons that say nothing about the message (outbox.
// Unavailable, idempotency.ErrInProgress). Those are "excused": the
// consumer counts them, per entry, in a hash of the group kept in Redis
// (so that a restarted consumer, or another one that claims the entry,
// sees them too), and subtracts them from Redis's count before comparing
// it with WithMaxDeliveries. A delivery cut short by a crash is not
// excused: it counts.

// ExcusedTTL is how long the hash of excused deliveries of a group lives
// after it was last written. Entries are removed from it when their
// message is acknowledged or dead; the expiry only clears what is left by
// entries trimmed or deleted while pending.
const ExcusedTTL = 7 * 24 * time.Hour

// slotKey returns stream+suffix when the stream name carries a Redis
// Cluster hash tag, and "{stream}"+suffix otherwise, so that the key is in
// the stream's slot (a pipeline of both goes to one node; a script may
// touch both).
func slotKey(stream, suffix string) string {
	if i := strings.IndexByte(stream, '{'); i >= 0 {
		if j := strings.IndexByte(stream[i+1:], '}'); j > 0 {
			return stream + suffix
		}
	}
	if strings.ContainsAny(stream, "{}") {
		return stream + suffix // no valid tag can be made: another slot
	}
	return "{" + stream + "}" + suffix
}

// ExcusedKey returns the key of the hash in which consumers of group
// count, per pending entry id of stream, the deliveries that do not count
// towards WithMaxDeliveries.
func ExcusedKey(stream, group string) string {
	return slotKey(stream, ":outboxredis:excused:"+group)
}

// excuse records one excused delivery of each id. A failure is logged:
// those deliveries then count.
func (c *Consumer) excuse(ctx context.Context, ids ...string) {
	if len(ids) == 0 {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	pipe := c.rdb.Pipeline()
	for _, id := range ids {
		pipe.HIncrBy(actx, c.excusedKey, id, 1)
	}
	pipe.PExpire(actx, c.excusedKey, ExcusedTTL)
	if _, err := pipe.Exec(actx); err != nil {
		c.log.Warn("outboxredis: cannot record deliveries that do not count; they will", "entries", len(ids), "error", err)
	}
}

// ids returns the entry ids of msgs.
func ids(msgs []redis.XMessage) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.ID
	}
	return out
}
