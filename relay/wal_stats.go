package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
)

// WALStats describes the replication slot of a table in WAL mode
// (outbox.WAL): Inspector.GetStats fills Stats.WAL when the slot exists.
type WALStats struct {
	// Slot is the replication slot's name.
	Slot string
	// Status is the slot's wal_status: "reserved" or "extended" (fine),
	// "unreserved" (past max_slot_wal_keep_size: invalidated at the next
	// checkpoint unless the streamer catches up), "lost" (invalidated:
	// events were lost).
	Status string
	// Active reports that a relay streams the slot now.
	Active bool
	// LagBytes is the WAL from the slot's confirmed position to the end of
	// the WAL: what the server keeps for it.
	LagBytes int64
	// SafeBytes is how much more WAL can be written before the slot is
	// invalidated (safe_wal_size); -1 without max_slot_wal_keep_size.
	SafeBytes int64
	// OldestUnconfirmedAge is how long the oldest commit the streaming
	// relay received and has not confirmed has been committed; with no
	// relay streaming, how long since a relay last recorded its progress
	// (a lower bound).
	OldestUnconfirmedAge time.Duration
	// Streamer is the worker id of the relay that streamed it last, and
	// LastRecorded when it last recorded its progress (every second).
	Streamer     string
	LastRecorded time.Time
	// Warning describes what is past the thresholds (lag, age, status),
	// or is "".
	Warning string
}

// InspectWAL sets the replication slot whose health GetStats reports
// (default: the slot of the outbox.Plugin's WAL mode, or the table's name
// followed by "_wal") and the warning thresholds (DefaultWALWarnLag,
// DefaultWALWarnAge; see WithWALWarning).
func InspectWAL(slot string, lagBytes int64, age time.Duration) InspectorOption {
	return func(c *inspectorConfig) { c.walSlot, c.walLag, c.walAge = slot, lagBytes, age }
}

// walStats reads the slot's health, or returns nil where there is no slot.
func (i *Inspector) walStats(ctx context.Context) (*WALStats, error) {
	if i.kind != dialect.Postgres {
		return nil, nil
	}
	slot := i.walSlot
	if slot == "" {
		if setup, ok := outbox.WALOf(i.db); ok && setup.Table == i.table {
			slot = setup.Slot
		} else {
			slot = i.table + "_wal"
		}
	}
	db := i.db.WithContext(ctx)
	var st slotState
	if err := db.Raw(slotStateSQL, slot).Scan(&st).Error; err != nil {
		return nil, fmt.Errorf("relay: reading the slot %s: %w", slot, err)
	}
	if !st.Exists {
		return nil, nil
	}
	w := &WALStats{Slot: slot, Status: st.Status, Active: st.Active, LagBytes: st.LagBytes, SafeBytes: -1}
	if st.SafeWAL != nil {
		w.SafeBytes = *st.SafeWAL
	}
	var row struct {
		Streamer    string
		Oldest      *time.Time
		UpdatedAt   time.Time
		OldestAge   *float64
		RecordedAge float64
	}
	// The status table is MigrateWAL's; without it, the slot's own figures.
	err := db.Raw(`SELECT streamer, oldest_unconfirmed_at AS oldest, updated_at,
		EXTRACT(EPOCH FROM now() - oldest_unconfirmed_at)::float8 AS oldest_age, EXTRACT(EPOCH FROM now() - updated_at)::float8 AS recorded_age
		FROM `+outbox.WALStatusTable(i.table)+` WHERE slot = ?`, slot).Scan(&row).Error
	if err == nil && !row.UpdatedAt.IsZero() {
		w.Streamer, w.LastRecorded = row.Streamer, row.UpdatedAt
		switch {
		case row.OldestAge != nil:
			w.OldestUnconfirmedAge = secs(*row.OldestAge)
		case !st.Active && st.LagBytes > 0:
			w.OldestUnconfirmedAge = secs(row.RecordedAge)
		}
	}
	w.Warning = walWarning(st, w.OldestUnconfirmedAge, i.walLag, i.walAge)
	if !st.Active && w.Warning == "" && st.LagBytes > 0 {
		w.Warning = "no relay streams the slot"
	}
	return w, nil
}

func secs(s float64) time.Duration { return max(time.Duration(s*float64(time.Second)), 0) }
