package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// cleanupBatch is how many rows one retention DELETE removes, and
// cleanupBatches how many DELETEs one cleanup runs before the relay goes
// back to delivering.
const (
	cleanupBatch   = 1000
	cleanupBatches = 10
	// keyLockRetention is how long a partition key's lock row is kept
	// after its last use.
	keyLockRetention = 24 * time.Hour
)

// cleanup deletes published events older than the retention (and their
// attempt records, where the attempt log table exists), in batches of
// cleanupBatch, stopping after cleanupBatches or when ctx ends so that it
// never holds the relay long; Start calls it again at once while it keeps
// deleting that many. It returns how many it deleted. It also prunes the
// partition-key lock rows not used for keyLockRetention, where the
// dialect keeps such rows (sqldriver.Retention).
func (r *Relay) cleanup(ctx context.Context) (int64, error) {
	drv := r.kind.Driver()
	var n int64
	for range cleanupBatches {
		found, deleted, err := drv.DeletePublished(ctx, r.db, sqldriver.DeletePublishedParams{
			Table: r.table, OlderThan: r.cfg.retention, Limit: cleanupBatch, Attempts: r.attempts.existing(r.db.WithContext(ctx)),
		})
		n += deleted
		if err != nil {
			return n, fmt.Errorf("relay: %w", err)
		}
		if found < cleanupBatch {
			break
		}
	}
	if _, err := drv.PruneKeyLocks(ctx, r.db, r.table, keyLockRetention, cleanupBatch); err != nil {
		return n, fmt.Errorf("relay: pruning partition-key locks: %w", err)
	}
	if n > 0 {
		r.log.Debug("retention deleted published events", "deleted", n, "older_than", r.cfg.retention)
	}
	return n, nil
}
