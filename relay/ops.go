package relay

import (
	"context"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Filter narrows the listings, counts and bulk operations of an
// Inspector. Every field left zero matches everything; the fields set
// must all match. Values are bound, never spliced into SQL.
type Filter struct {
	// Type keeps events of this type only.
	Type string
	// Topic, PartitionKey, AggregateType, AggregateID, EventID and
	// TenantID keep events whose column equals the value.
	Topic, PartitionKey, AggregateType, AggregateID, EventID, TenantID string
	// OlderThan keeps events created more than this long ago (by the
	// database clock).
	OlderThan time.Duration
	// CreatedAfter and CreatedBefore keep events created at or after,
	// and before, these instants.
	CreatedAfter, CreatedBefore time.Time
	// AfterID keeps events whose row id is greater: the paging cursor of
	// ListDead and of an oldest-first ListEvents (pass the ID of the last
	// event of the previous page).
	AfterID int64
	// BeforeID keeps events whose row id is smaller: the paging cursor of
	// a newest-first ListEvents.
	BeforeID int64
	// Limit bounds a page of ListDead and ListEvents (default 100, at
	// most 1000), and the batch size of ReplayAll.
	Limit int
}

func (f Filter) limit(def int) int {
	if f.Limit <= 0 {
		return def
	}
	return min(f.Limit, 1000)
}

// ops is one call of an Inspector (or of a relay's own reads): the
// database bound to the call's context, its dialect and the table.
type ops struct {
	db    *gorm.DB
	kind  dialect.Kind
	table string
}

// tbl starts a GORM query of the outbox table.
func (o *ops) tbl() *gorm.DB { return o.db.Table(gormTable(o.kind, o.table)) }

// gormTable returns name as GORM's Table must be given it to reach the
// table that the outbox's SQL names unquoted: GORM quotes the name, and
// PostgreSQL folds an unquoted name to lower case (OrderEvents is the
// table orderevents), so there it is lower-cased.
func gormTable(kind dialect.Kind, name string) string { return kind.Driver().GormTable(name) }

// where applies f to a query of rows with the given status (any status
// when it is empty).
func (o *ops) where(status outbox.Status, f Filter) *gorm.DB {
	q := o.tbl()
	if lit, ok := statusSQL[status]; ok {
		// Literal, so that the partial indexes whose predicate names the
		// status match (a bound value does not, on PostgreSQL's generic
		// plans nor on SQLite).
		q = q.Where("status = " + lit)
	} else if status != "" {
		q = q.Where("status = ?", string(status))
	}
	if f.PartitionKey != "" {
		// Implied by partition_key = ?, but said as the key index's
		// predicate says it, so that every planner matches it.
		q = q.Where("partition_key <> ''")
	}
	for _, c := range [...]struct{ col, v string }{{"type", f.Type}, {"topic", f.Topic}, {"partition_key", f.PartitionKey},
		{"aggregate_type", f.AggregateType}, {"aggregate_id", f.AggregateID}, {"event_id", f.EventID}, {"tenant_id", f.TenantID}} {
		if c.v != "" {
			q = q.Where(c.col+" = ?", c.v)
		}
	}
	if f.OlderThan > 0 {
		s, a := o.kind.NowPlus(-f.OlderThan)
		q = q.Where("created_at < "+s, a...)
	}
	if !f.CreatedAfter.IsZero() {
		q = q.Where("created_at >= ?", o.kind.Time(f.CreatedAfter))
	}
	if !f.CreatedBefore.IsZero() {
		q = q.Where("created_at < ?", o.kind.Time(f.CreatedBefore))
	}
	if f.AfterID > 0 {
		q = q.Where("id > ?", f.AfterID)
	}
	if f.BeforeID > 0 {
		q = q.Where("id < ?", f.BeforeID)
	}
	return q
}

// ListDead returns dead events matching f, oldest first, one page at a
// time: pass the last ID of a page as f.AfterID to get the next.
func (i *Inspector) ListDead(ctx context.Context, f Filter) ([]outbox.OutboxEvent, error) {
	o := i.at(ctx)
	f.BeforeID = 0
	var rows []outbox.OutboxEvent
	if err := o.where(outbox.StatusDead, f).Order("id").Limit(f.limit(100)).Find(&rows).Error; err != nil {
		return nil, fmt.Errorf("relay: listing dead events: %w", err)
	}
	return rows, nil
}

// ReplayAll replays every dead event matching f (its AfterID, BeforeID
// and Limit are ignored but for the batch size, default 500), in
// batches, and reports how many it replayed.
func (i *Inspector) ReplayAll(ctx context.Context, f Filter) (int64, error) {
	o := i.at(ctx)
	batch := f.limit(500)
	f.AfterID, f.BeforeID = 0, 0
	var total int64
	for {
		var ids []int64
		if err := o.where(outbox.StatusDead, f).Order("id").Limit(batch).Pluck("id", &ids).Error; err != nil {
			return total, fmt.Errorf("relay: replaying dead events: %w", err)
		}
		if len(ids) == 0 {
			return total, nil
		}
		n, err := o.replay(o.tbl().Where("status = ? AND id IN ?", string(outbox.StatusDead), ids))
		total += n
		if err != nil {
			return total, fmt.Errorf("relay: replaying dead events: %w", err)
		}
		f.AfterID = ids[len(ids)-1]
	}
}

// replay sets the rows of q back to pending, attempts, error, lease and
// publication time cleared, and wakes the relays.
func (o *ops) replay(q *gorm.DB) (int64, error) {
	now, args := o.kind.Now()
	res := q.Updates(map[string]any{
		"status":       string(outbox.StatusPending),
		"attempts":     0,
		"last_error":   nil,
		"locked_by":    nil,
		"locked_until": nil,
		"published_at": nil,
		"available_at": gorm.Expr(now, args...),
	})
	if res.Error != nil {
		return 0, res.Error
	}
	if res.RowsAffected > 0 {
		newDriver(o.kind, o.table, false).notify(o.db)
	}
	return res.RowsAffected, nil
}

// PurgePublished deletes published events older than age (by published
// time), in batches, and reports how many it deleted.
func (i *Inspector) PurgePublished(ctx context.Context, age time.Duration) (int64, error) {
	return deletePublished(ctx, i.db, i.kind, i.table, i.attempts.existing(i.db.WithContext(ctx)), age, -1)
}

// PurgePublishedBefore deletes published events published before the
// instant before, in batches, and reports how many it deleted: a purge
// confirmed at one moment (before = Now minus the age) deletes nothing
// more when it is run again.
func (i *Inspector) PurgePublishedBefore(ctx context.Context, before time.Time) (int64, error) {
	o := i.at(ctx)
	q := o.tbl().Where("status = ? AND published_at < ?", string(outbox.StatusPublished), o.kind.Time(before))
	return deleteBatches(o.db, o.table, i.attempts.existing(o.db), q, outbox.StatusPublished, -1)
}

// Now returns the current time by the database clock (the clock that
// stamps created_at and published_at), in UTC.
func (i *Inspector) Now(ctx context.Context) (time.Time, error) {
	return i.at(ctx).dbNow()
}

// dbNow reads the database clock; SQLite, which has none of its own,
// binds the process clock.
func (o *ops) dbNow() (time.Time, error) {
	expr, args := o.kind.Now()
	if len(args) > 0 {
		return time.Now().UTC(), nil
	}
	var now time.Time
	if err := o.db.Raw("SELECT " + expr + " AS now").Scan(&now).Error; err != nil {
		return time.Time{}, fmt.Errorf("relay: reading the database clock: %w", err)
	}
	return o.kind.StoredTime(now).UTC(), nil
}

// PurgeDead deletes dead events created more than age ago, in batches, and
// reports how many it deleted. Nothing else ever deletes a dead event.
func (i *Inspector) PurgeDead(ctx context.Context, age time.Duration) (int64, error) {
	o := i.at(ctx)
	q := o.where(outbox.StatusDead, Filter{OlderThan: max(age, time.Nanosecond)})
	return deleteBatches(o.db, o.table, i.attempts.existing(o.db), q, outbox.StatusDead, -1)
}

// deletePublished deletes published rows older than age, and their
// records in the attempt log table attempts (if not ""), at most
// maxBatches batches (all with -1).
func deletePublished(ctx context.Context, db *gorm.DB, kind dialect.Kind, table, attempts string, age time.Duration, maxBatches int) (int64, error) {
	s, a := kind.NowPlus(-age)
	q := db.WithContext(ctx).Table(gormTable(kind, table)).Where("status = ? AND published_at < "+s, append([]any{string(outbox.StatusPublished)}, a...)...)
	return deleteBatches(db.WithContext(ctx), table, attempts, q, outbox.StatusPublished, maxBatches)
}

// deleteBatches selects up to cleanupBatch ids with q and deletes them
// (with their records in the attempt log table attempts, if not ""),
// repeatedly, until fewer are found or maxBatches were deleted.
func deleteBatches(db *gorm.DB, table, attempts string, q *gorm.DB, status outbox.Status, maxBatches int) (int64, error) {
	var total int64
	for b := 0; maxBatches < 0 || b < maxBatches; b++ {
		var ids []int64
		if err := q.Session(&gorm.Session{}).Order("id").Limit(cleanupBatch).Pluck("id", &ids).Error; err != nil {
			return total, fmt.Errorf("relay: selecting %s events to delete: %w", status, err)
		}
		if len(ids) == 0 {
			break
		}
		n, err := sqldriver.DeleteEvents(db, table, attempts, ids, string(status))
		if err != nil {
			return total, fmt.Errorf("relay: deleting %s events: %w", status, err)
		}
		total += n
		if len(ids) < cleanupBatch {
			break
		}
	}
	return total, nil
}
