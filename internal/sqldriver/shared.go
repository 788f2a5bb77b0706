package sqldriver

import (
	"context"
	"fmt"
	"strings"

	"gorm.io/gorm"
)

// The helpers below are SQL that the dialects share, given the parts that
// differ; a Driver calls them from its methods.

// EventColumns are the columns InsertEvents writes on a database whose
// server fills created_at.
const EventColumns = "event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, max_attempts, available_at"

// EventInsert describes a dialect's multi-row event INSERT.
type EventInsert struct {
	// Clock binds available_at (and created_at when ClientCreatedAt).
	Clock Clock
	// ClientCreatedAt: the database has no server clock, nor a DEFAULT
	// keyword in VALUES; available_at and created_at are always bound.
	ClientCreatedAt bool
	// Conflict is the clause that skips duplicate event ids.
	Conflict string
}

// Build returns the INSERT of p's rows and its arguments.
func (ins EventInsert) Build(p InsertEventsParams) (string, []any) {
	var sb strings.Builder
	cols := EventColumns
	if ins.ClientCreatedAt {
		cols += ", created_at"
	}
	sb.Grow(64 + len(cols) + len(p.Table) + len(p.Rows)*42 + len(ins.Conflict))
	sb.WriteString("INSERT INTO " + p.Table + " (" + cols + ") VALUES ")
	per := 12
	if ins.ClientCreatedAt {
		per++
	}
	args := make([]any, 0, len(p.Rows)*per)
	for i := range p.Rows {
		r := &p.Rows[i]
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ")
		args = append(args, r.EventID, r.Type, r.Version, r.TenantID, r.AggregateType,
			r.AggregateID, r.PartitionKey, r.Topic, r.Payload, r.Headers, r.MaxAttempts)
		switch {
		case r.AvailableAt != nil:
			sb.WriteString("?")
			args = append(args, ins.Clock.Time(*r.AvailableAt))
		case ins.ClientCreatedAt:
			sb.WriteString("?")
			args = append(args, ins.Clock.Time(p.Now))
		default:
			sb.WriteString("DEFAULT")
		}
		if ins.ClientCreatedAt {
			sb.WriteString(", ?")
			args = append(args, ins.Clock.Time(p.Now))
		}
		sb.WriteString(")")
	}
	if p.SkipDuplicates {
		sb.WriteString(ins.Conflict)
	}
	return sb.String(), args
}

// Exec runs the INSERT of p's rows through tx and returns the affected-row
// count.
func (ins EventInsert) Exec(tx *gorm.DB, p InsertEventsParams) (int64, error) {
	q, args := ins.Build(p)
	res := tx.Exec(q, args...)
	return res.RowsAffected, res.Error
}

// FindEvents is Writer.FindEvents with suffix, the clause that makes the
// SELECT read the latest committed rows ("" where it does already).
func FindEvents(tx *gorm.DB, p FindEventsParams, suffix string, dest any) error {
	return tx.Raw("SELECT "+p.Columns+" FROM "+p.Table+" WHERE event_id IN ?"+suffix, p.IDs).Scan(dest).Error
}

// TakeOverKey is Idempotency.TakeOverKey by clock c.
func TakeOverKey(db *gorm.DB, c Clock, p TakeOverKeyParams) (bool, error) {
	var (
		sb   strings.Builder
		args = []any{p.Status, p.Token}
	)
	sb.WriteString("UPDATE " + p.Table + " SET status = ?, token = ?, locked_until = ")
	if p.LockedFor > 0 {
		s, a := c.NowPlus(p.LockedFor)
		sb.WriteString(s)
		args = append(args, a...)
	} else {
		sb.WriteString("NULL")
	}
	s, a := c.NowPlus(p.Life)
	sb.WriteString(", expires_at = " + s)
	args = append(args, a...)
	s, a = c.Now()
	sb.WriteString(" WHERE idempotency_key = ? AND status = 'running' AND locked_until <= " + s)
	args = append(append(args, p.Key), a...)
	res := db.Exec(sb.String(), args...)
	return res.RowsAffected == 1, res.Error
}

// InsertKey builds the INSERT of Idempotency.InsertKey by clock c:
// created_at is bound when clientCreatedAt (no server clock), and
// conflict is the dialect's InsertIgnore clause of idempotency_key.
func InsertKey(c Clock, p InsertKeyParams, clientCreatedAt bool, conflict string) (string, []any) {
	var sb strings.Builder
	cols := "idempotency_key, status, token, locked_until, expires_at"
	if clientCreatedAt {
		cols += ", created_at"
	}
	args := []any{p.Key, p.Status, p.Token}
	sb.WriteString("INSERT INTO " + p.Table + " (" + cols + ") VALUES (?, ?, ?, ")
	if p.LockedFor > 0 {
		s, a := c.NowPlus(p.LockedFor)
		sb.WriteString(s)
		args = append(args, a...)
	} else {
		sb.WriteString("NULL")
	}
	s, a := c.NowPlus(p.Life)
	sb.WriteString(", " + s)
	args = append(args, a...)
	if clientCreatedAt {
		s, a := c.Now()
		sb.WriteString(", " + s)
		args = append(args, a...)
	}
	sb.WriteString(")" + conflict)
	return sb.String(), args
}

// VersionTableSQL is Migration.VersionTableSQL with applied_at declared
// as applied.
func VersionTableSQL(table, applied string) string {
	return "CREATE TABLE IF NOT EXISTS " + table + " (target VARCHAR(128) NOT NULL, name VARCHAR(128) NOT NULL, " +
		"applied_at " + applied + ", PRIMARY KEY (target, name))"
}

// DeletePublished is Retention.DeletePublished by clock c: it selects the
// ids, then deletes them by id (a DELETE … ORDER BY … LIMIT is not
// portable).
func DeletePublished(ctx context.Context, db *gorm.DB, c Clock, p DeletePublishedParams) (int, int64, error) {
	db = db.WithContext(ctx)
	before, args := c.NowPlus(-p.OlderThan)
	var ids []int64
	err := db.Raw("SELECT id FROM "+p.Table+" WHERE status = 'published' AND published_at < (SELECT "+before+") ORDER BY published_at LIMIT ?",
		append(args, p.Limit)...).Scan(&ids).Error
	if err != nil {
		return 0, 0, fmt.Errorf("selecting published events to delete: %w", err)
	}
	if len(ids) == 0 {
		return 0, 0, nil
	}
	n, err := DeleteEvents(db, p.Table, p.Attempts, ids, "published")
	if err != nil {
		return len(ids), 0, fmt.Errorf("deleting published events: %w", err)
	}
	return len(ids), n, nil
}

// DeleteEvents deletes the events of table with the ids that are still
// in status and, when attempts is set, their records in that attempt log
// table, in one transaction, and returns how many events it deleted.
// Records of events it did not delete (their status changed since they
// were selected) are kept.
func DeleteEvents(db *gorm.DB, table, attempts string, ids []int64, status string) (int64, error) {
	if attempts == "" {
		res := db.Exec("DELETE FROM "+table+" WHERE id IN ? AND status = ?", ids, status)
		return res.RowsAffected, res.Error
	}
	var n int64
	err := db.Transaction(func(tx *gorm.DB) error {
		res := tx.Exec("DELETE FROM "+table+" WHERE id IN ? AND status = ?", ids, status)
		if res.Error != nil || res.RowsAffected == 0 {
			return res.Error
		}
		n = res.RowsAffected
		if n == int64(len(ids)) {
			return tx.Exec("DELETE FROM "+attempts+" WHERE event_row_id IN ?", ids).Error
		}
		// Within the transaction the deleted events are gone; the others
		// keep their records.
		return tx.Exec("DELETE FROM "+attempts+" WHERE event_row_id IN ? AND event_row_id NOT IN (SELECT id FROM "+table+" WHERE id IN ?)", ids, ids).Error
	})
	return n, err
}
