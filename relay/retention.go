package relay

import (
	"context"
	"fmt"

	"github.com/gormoutbox/outbox/internal/dialect"
)

// cleanupBatch is how many rows one retention DELETE removes, and
// cleanupBatches how many DELETEs one cleanup runs before the relay goes
// back to delivering.
const (
	cleanupBatch   = 1000
	cleanupBatches = 10
)

// cleanup deletes published events older than the retention, in batches of
// cleanupBatch, stopping after cleanupBatches or when ctx ends so that it
// never holds the relay long; Start calls it again at once while it keeps
// deleting that many. It returns how many it deleted. On MySQL it also
// prunes the partition-key lock rows not used for a day.
func (r *Relay) cleanup(ctx context.Context) (int64, error) {
	n, err := deletePublished(ctx, r.db, r.kind, r.table, r.cfg.retention, cleanupBatches)
	if err != nil {
		return n, err
	}
	if r.kind == dialect.MySQL {
		if err := r.db.WithContext(ctx).Exec("DELETE FROM "+r.table+"_keys WHERE locked_at < UTC_TIMESTAMP(6) - INTERVAL 1 DAY LIMIT ?", cleanupBatch).Error; err != nil {
			return n, fmt.Errorf("relay: pruning partition-key locks: %w", err)
		}
	}
	if n > 0 {
		r.log.Debug("retention deleted published events", "deleted", n, "older_than", r.cfg.retention)
	}
	return n, nil
}
