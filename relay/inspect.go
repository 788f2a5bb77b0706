package relay

import (
	"fmt"

	"github.com/gormoutbox/outbox"
)

// idChunk bounds the ids bound in one statement, well under every
// database's bind-parameter limit.
const idChunk = 1000

// resetByEventID returns the events with the given ids that are in one of
// the states to pending, chunk by chunk.
func (o *ops) resetByEventID(verb string, eventIDs []string, states ...outbox.Status) (int64, error) {
	in := make([]string, len(states))
	for i, s := range states {
		in[i] = string(s)
	}
	var total int64
	err := inChunks(eventIDs, func(ids []string) error {
		n, err := o.replay(o.tbl().Where("status IN ? AND event_id IN ?", in, ids))
		total += n
		return err
	})
	if err != nil {
		return total, fmt.Errorf("relay: %s %d events: %w", verb, len(eventIDs), err)
	}
	return total, nil
}

// inChunks calls fn with ids, idChunk at a time.
func inChunks(ids []string, fn func([]string) error) error {
	for len(ids) > 0 {
		n := min(len(ids), idChunk)
		if err := fn(ids[:n]); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// tableExists reports whether table exists, named as the outbox's
// statements name it: unquoted. PostgreSQL folds an unquoted OrderEvents
// to orderevents, which is what its catalog holds, so Migrator().HasTable
// would not find it; to_regclass resolves the name as a query does.
func (o *ops) tableExists(table string) bool {
	found, err := o.kind.Driver().TableExists(o.db, table)
	return err == nil && found
}
