package relay

import (
	"context"
	"fmt"
	"time"
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

// cleanup deletes published events older than the retention, in batches of
// cleanupBatch, stopping after cleanupBatches or when ctx ends so that it
// never holds the relay long; Start calls it again at once while it keeps
// deleting that many. It returns how many it deleted. It also prunes the
// partition-key lock rows not used for keyLockRetention, where the
// dialect keeps such rows (sqldriver.Retention).
func (r *Relay) cleanup(ctx context.Context) (int64, error) {
	n, err := deletePublished(ctx, r.db, r.kind, r.table, r.cfg.retention, cleanupBatches)
	if err != nil {
		return n, err
	}
	if _, err := r.kind.Driver().PruneKeyLocks(ctx, r.db, r.table, keyLockRetention, cleanupBatch); err != nil {
		return n, fmt.Errorf("relay: pruning partition-key locks: %w", err)
	}
	if n > 0 {
		r.log.Debug("retention deleted published events", "deleted", n, "older_than", r.cfg.retention)
	}
	return n, nil
}
