package relay

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
)

// ErrEventNotFound is returned (wrapped) by GetEvent for an event id that
// is not in the outbox table (never emitted, or deleted by retention or a
// purge).
var ErrEventNotFound = errors.New("relay: event not found")

// idChunk bounds the ids bound in one statement, well under every
// database's bind-parameter limit.
const idChunk = 1000

// GetEvent returns the row of the event with the given event id (the
// Event.ID it was emitted with), payload and headers included, or an error
// wrapping ErrEventNotFound.
func GetEvent(ctx context.Context, db *gorm.DB, eventID string) (*outbox.OutboxEvent, error) {
	o, err := opsFor(ctx, db)
	if err != nil {
		return nil, err
	}
	var rows []outbox.OutboxEvent
	if err := o.tbl().Where("event_id = ?", eventID).Limit(1).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("relay: reading event %q: %w", eventID, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%w: %q in %s", ErrEventNotFound, eventID, o.table)
	}
	return &rows[0], nil
}

// EventStatuses returns the status of each of the given events, by event
// id; ids that are not in the table are absent from the map.
func EventStatuses(ctx context.Context, db *gorm.DB, eventIDs ...string) (map[string]outbox.Status, error) {
	o, err := opsFor(ctx, db)
	if err != nil {
		return nil, err
	}
	out := make(map[string]outbox.Status, len(eventIDs))
	err = inChunks(eventIDs, func(ids []string) error {
		var rows []struct {
			EventID string
			Status  outbox.Status
		}
		if err := o.tbl().Select("event_id, status").Where("event_id IN ?", ids).Scan(&rows).Error; err != nil {
			return err
		}
		for _, r := range rows {
			out[r.EventID] = r.Status
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("relay: reading the status of %d events: %w", len(eventIDs), err)
	}
	return out, nil
}

// Redeliver returns published and dead events, by event id, to pending
// with attempts, last error, lease and publication time cleared, so that a
// relay delivers them again (a consumer lost them), and reports how many
// it changed. Events in any other state are left alone: pending and
// failed ones will be delivered anyway, and a publishing one is in a
// relay's hands. The status is checked by the UPDATE itself, so an event
// a relay claims meanwhile is never touched.
//
// A redelivered event with a PartitionKey is delivered after the events
// of its key that were already delivered, and holds back those of its key
// still waiting (it is older) until it is delivered. Consumers see it
// again with the same event id: an idempotent consumer that recorded it
// skips it, so clear that record first if the effect must happen again.
func Redeliver(ctx context.Context, db *gorm.DB, eventIDs ...string) (int64, error) {
	return resetByEventID(ctx, db, "redelivering", eventIDs, outbox.StatusPublished, outbox.StatusDead)
}

// resetByEventID returns the events with the given ids that are in one of
// the states to pending, chunk by chunk.
func resetByEventID(ctx context.Context, db *gorm.DB, verb string, eventIDs []string, states ...outbox.Status) (int64, error) {
	o, err := opsFor(ctx, db)
	if err != nil {
		return 0, err
	}
	in := make([]string, len(states))
	for i, s := range states {
		in[i] = string(s)
	}
	var total int64
	err = inChunks(eventIDs, func(ids []string) error {
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
	if o.kind == dialect.Postgres {
		var found bool
		err := o.db.Raw("SELECT to_regclass(?) IS NOT NULL", table).Scan(&found).Error
		return err == nil && found
	}
	return o.db.Migrator().HasTable(table)
}
