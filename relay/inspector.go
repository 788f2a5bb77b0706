package relay

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
)

// Inspector reads and repairs one outbox table: the operations behind the
// CLI's dead, show, redeliver, stats and purge commands and the admin
// page. NewInspector resolves the database's dialect and the table once;
// every method then runs plain bound SQL against that table. An Inspector
// holds no connection of its own (only the counts of Throughput's ended
// minutes) and is safe for concurrent use.
type Inspector struct {
	db       *gorm.DB
	kind     dialect.Kind
	table    string
	walSlot  string // InspectWAL
	walLag   int64
	walAge   time.Duration
	attempts *attemptTable
	minutes  *minuteCache // Throughput's settled minutes
}

// InspectorOption configures NewInspector.
type InspectorOption func(*inspectorConfig)

type inspectorConfig struct {
	table   string
	walSlot string
	walLag  int64
	walAge  time.Duration
}

// InspectTable makes the Inspector read the outbox table name instead of
// the table of the outbox.Plugin installed on db (outbox_events without
// one). name must be a plain SQL identifier.
func InspectTable(name string) InspectorOption {
	return func(c *inspectorConfig) { c.table = name }
}

// NewInspector returns an Inspector of db's outbox table. It checks the
// dialect (PostgreSQL, MySQL/MariaDB or SQLite), the connection's settings
// (parseTime=true on MySQL) and that the table exists: a missing table is
// an error wrapping outbox.ErrNotMigrated, an unusable option or
// connection one wrapping ErrInvalidOption.
func NewInspector(db *gorm.DB, opts ...InspectorOption) (*Inspector, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidOption)
	}
	cfg := inspectorConfig{table: tableOf(db), walLag: DefaultWALWarnLag, walAge: DefaultWALWarnAge}
	for _, o := range opts {
		o(&cfg)
	}
	if err := dialect.CheckIdent(cfg.table, 64); err != nil {
		return nil, fmt.Errorf("%w: table: %w", ErrInvalidOption, err)
	}
	kind, err := dialect.Of(db)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if err := dialect.CheckConn(db, ErrInvalidOption); err != nil {
		return nil, err
	}
	missing, err := dialect.MissingTables(db, cfg.table)
	if err != nil {
		return nil, fmt.Errorf("relay: checking the outbox table: %w", err)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("relay: %w: missing table %s: run outbox.Migrate (or `outbox migrate`)",
			outbox.ErrNotMigrated, strings.Join(missing, ", "))
	}
	return &Inspector{db: db, kind: kind, table: cfg.table, walSlot: cfg.walSlot, walLag: cfg.walLag, walAge: cfg.walAge, attempts: newAttemptTable(kind, cfg.table, false), minutes: &minuteCache{}}, nil
}

// Table returns the outbox table the Inspector reads.
func (i *Inspector) Table() string { return i.table }

// Dialect returns the database family of the Inspector's table:
// "postgres", "mysql" (MariaDB too) or "sqlite".
func (i *Inspector) Dialect() string { return i.kind.String() }

// at returns the operations of one call, bound to ctx.
func (i *Inspector) at(ctx context.Context) *ops {
	return &ops{db: i.db.WithContext(ctx), kind: i.kind, table: i.table}
}

// ErrEventNotFound is returned (wrapped) by GetEvent for an event id that
// is not in the outbox table (never emitted, or deleted by retention or a
// purge).
var ErrEventNotFound = errors.New("relay: event not found")

// GetEvent returns the row of the event with the given event id (the
// Event.ID it was emitted with), payload and headers included, or an error
// wrapping ErrEventNotFound.
func (i *Inspector) GetEvent(ctx context.Context, eventID string) (*outbox.OutboxEvent, error) {
	o := i.at(ctx)
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
func (i *Inspector) EventStatuses(ctx context.Context, eventIDs ...string) (map[string]outbox.Status, error) {
	o := i.at(ctx)
	out := make(map[string]outbox.Status, len(eventIDs))
	err := inChunks(eventIDs, func(ids []string) error {
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

// Replay returns the dead events with the given event ids to pending, with
// attempts, last error and lease cleared, and reports how many it replayed.
// Events that are not dead are left alone (and not counted). A replayed
// event is delivered again even if later events of its partition key were
// delivered meanwhile.
func (i *Inspector) Replay(ctx context.Context, eventIDs ...string) (int64, error) {
	return i.at(ctx).resetByEventID("replaying", eventIDs, outbox.StatusDead)
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
func (i *Inspector) Redeliver(ctx context.Context, eventIDs ...string) (int64, error) {
	return i.at(ctx).resetByEventID("redelivering", eventIDs, outbox.StatusPublished, outbox.StatusDead)
}

// GetStats counts the events per status, measures the oldest pending
// event's wait by the database clock, and lists the relays' heartbeats.
func (i *Inspector) GetStats(ctx context.Context) (*Stats, error) {
	o := i.at(ctx)
	s, err := o.stats()
	if err != nil {
		return nil, err
	}
	if s.Relays, err = o.relays(); err != nil {
		return nil, err
	}
	if s.WAL, err = i.walStats(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Relays lists the relays that recorded heartbeats in the table's
// <table>_relays table, live and stale, by id (none when that table is
// missing).
func (i *Inspector) Relays(ctx context.Context) ([]RelayStatus, error) {
	return i.at(ctx).relays()
}
