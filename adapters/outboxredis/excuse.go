package outboxredis

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Excused deliveries.
//
// Redis counts every delivery of an entry to a group (XREADGROUP, XCLAIM,
// XAUTOCLAIM without JUSTID), including deliveries that never reached the
// handler (the rest of a batch when a handler reported its dependency
// unavailable, Run's context ended, or the entry waited for its key's
// predecessor) and runs that the consumer does not count (outbox.
// Unavailable, outbox.Snooze, idempotency.ErrInProgress: Retry with
// counted false). Those are "excused": the consumer counts them, per
// entry, in a hash of the group kept in Redis (so that a restarted
// consumer, or another one that adopts the entry, sees them too), and
// subtracts them from Redis's count for consume.Delivery.Attempt. A
// delivery cut short by a crash is not excused: it counts.

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
// towards consume.WithMaxDeliveries.
func ExcusedKey(stream, group string) string {
	return slotKey(stream, ":outboxredis:excused:"+group)
}

// excuse records one excused delivery of id. A failure is returned (the
// delivery then counts).
func (t *transport) excuse(ctx context.Context, id string) error {
	pipe := t.rdb.Pipeline()
	pipe.HIncrBy(ctx, t.excusedKey, id, 1)
	pipe.PExpire(ctx, t.excusedKey, ExcusedTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("outboxredis: recording a delivery of %s that does not count: %w", id, err)
	}
	return nil
}
