// Package sqlite is the sqldriver.Driver of SQLite.
//
// SQLite has no server clock: the process clock is bound. Times are
// stored as text, UTC with a fixed-width fraction, so that comparing text
// compares times. SQLite runs one writer at a time.
package sqlite

import (
	"context"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Driver is SQLite's sqldriver.Driver. The zero value is ready.
type Driver struct{}

var _ sqldriver.Driver = Driver{}

// Name returns "sqlite".
func (Driver) Name() string { return "sqlite" }

// DialectorNames returns the names of GORM's SQLite dialectors.
func (Driver) DialectorNames() []string { return []string{"sqlite", "sqlite3"} }

// timeLayout is the text form of times: UTC with a fixed-width fraction,
// so that text comparison orders times correctly. The mattn/go-sqlite3
// driver parses it back into a time.Time.
const timeLayout = "2006-01-02 15:04:05.000000000+00:00"

// Now binds the process clock.
func (d Driver) Now() (string, []any) { return "?", []any{d.Time(time.Now())} }

// NowPlus binds the process clock plus d.
func (d Driver) NowPlus(dur time.Duration) (string, []any) {
	return "?", []any{d.Time(time.Now().Add(dur))}
}

// Time returns t as UTC text with a fixed-width fraction.
func (Driver) Time(t time.Time) any { return t.UTC().Format(timeLayout) }

// StoredTime returns t: the text holds its zone.
func (Driver) StoredTime(t time.Time) time.Time { return t }

// SecondsSince subtracts Julian days.
func (Driver) SecondsSince(expr string) string {
	return "((julianday('now') - julianday((" + expr + "))) * 86400.0)"
}

// WholeMinutesSince floors SecondsSince / 60 without FLOOR (one of
// SQLite's optional math functions): the cast truncates toward zero, so
// the value is shifted to be positive first (any duration within 1,900
// years), and expr appears once, so that its arguments bind once.
func (d Driver) WholeMinutesSince(expr string) string {
	return "(CAST(" + d.SecondsSince(expr) + " / 60 + 1000000000 AS INTEGER) - 1000000000)"
}

// InsertIgnore is ON CONFLICT (col) DO NOTHING.
func (Driver) InsertIgnore(col string) string { return " ON CONFLICT (" + col + ") DO NOTHING" }

// InsertIgnoreCounted is true: a skipped row counts 0.
func (Driver) InsertIgnoreCounted() bool { return true }

// LazyCommit is "": SQLite's synchronous is a connection setting.
func (Driver) LazyCommit() string { return "" }

// ByID names table as it is: the planner reads rows by an id list through
// the primary key.
func (Driver) ByID(table string) string { return table }

// IDList is col IN (?, …).
func (Driver) IDList(col string, ids []int64) (string, []any) { return sqldriver.InList(col, ids) }

// Upsert is ON CONFLICT (key) DO UPDATE SET c = excluded.c, ….
func (Driver) Upsert(key string, cols ...string) string {
	s := " ON CONFLICT (" + key + ") DO UPDATE SET "
	for i, c := range cols {
		if i > 0 {
			s += ", "
		}
		s += c + " = excluded." + c
	}
	return s
}

// CheckConn accepts any connection.
func (Driver) CheckConn(*gorm.DB) error { return nil }

// TableExists looks table up in sqlite_master, ignoring case as SQLite
// resolves names.
func (Driver) TableExists(db *gorm.DB, table string) (bool, error) {
	var n int
	err := db.Raw("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE", table).Row().Scan(&n)
	return n > 0, err
}

// MissingTable reports SQLite's "no such table" error, as both drivers
// (mattn/go-sqlite3 and ncruces/go-sqlite3) word it.
func (Driver) MissingTable(err error) bool {
	return err != nil && strings.Contains(err.Error(), "no such table: ")
}

// EstimatedRows is not ok: SQLite keeps no row estimate unless ANALYZE
// was run: callers count.
func (Driver) EstimatedRows(*gorm.DB, string) (int64, bool, error) { return 0, false, nil }

// GormTable returns name: SQLite ignores the case of names.
func (Driver) GormTable(name string) string { return name }

// OutboxTables are the table and its heartbeats table.
func (Driver) OutboxTables(table string) []string { return []string{table, table + "_relays"} }

// insert binds available_at and created_at: SQLite has no DEFAULT keyword
// in VALUES, and no server clock.
var insert = sqldriver.EventInsert{Clock: Driver{}, ClientCreatedAt: true, Conflict: Driver{}.InsertIgnore("event_id")}

// InsertEvents inserts the rows in one statement, times bound from p.Now.
func (Driver) InsertEvents(tx *gorm.DB, p sqldriver.InsertEventsParams) (int64, error) {
	return insert.Exec(tx, p)
}

// InsertCountsRows is true: ON CONFLICT DO NOTHING counts inserted rows.
func (Driver) InsertCountsRows() bool { return true }

// SnapshotAfterUpdate is false: SQLite has one writer, whose reads see
// the database as its transaction left it.
func (Driver) SnapshotAfterUpdate() bool { return false }

// BeginWrite runs a DELETE that matches no row: a write statement takes
// the database's write lock (waiting for it, as any write does) when it
// starts, whatever it then changes.
func (Driver) BeginWrite(tx *gorm.DB, table string) error {
	return tx.Exec("DELETE FROM ? WHERE 0", clause.Table{Name: table}).Error
}

// LockKeys does nothing: SQLite runs one writer at a time already.
func (Driver) LockKeys(*gorm.DB, sqldriver.LockKeysParams) error { return nil }

// FindEvents reads plainly: with one writer the latest rows are visible.
func (Driver) FindEvents(tx *gorm.DB, p sqldriver.FindEventsParams, dest any) error {
	return sqldriver.FindEvents(tx, p, "", dest)
}

// InsertKey inserts with ON CONFLICT DO NOTHING, created_at bound.
func (d Driver) InsertKey(db *gorm.DB, p sqldriver.InsertKeyParams) (bool, error) {
	q, args := sqldriver.InsertKey(d, p, true, d.InsertIgnore("idempotency_key"))
	res := db.Exec(q, args...)
	return res.RowsAffected == 1, res.Error
}

// TakeOverKey is the shared conditional UPDATE.
func (d Driver) TakeOverKey(db *gorm.DB, p sqldriver.TakeOverKeyParams) (bool, error) {
	return sqldriver.TakeOverKey(db, d, p)
}

// DeletePublished is the shared SELECT of ids and DELETE by id.
func (d Driver) DeletePublished(ctx context.Context, db *gorm.DB, p sqldriver.DeletePublishedParams) (int, int64, error) {
	return sqldriver.DeletePublished(ctx, db, d, p)
}

// PruneKeyLocks does nothing: there are no key lock rows.
func (Driver) PruneKeyLocks(context.Context, *gorm.DB, string, time.Duration, int) (int64, error) {
	return 0, nil
}

// LockMigrations runs fn in one transaction: it takes the write lock once
// and waits for it (busy timeout) instead of failing between two
// statements.
func (Driver) LockMigrations(db *gorm.DB, fn func(tx *gorm.DB) error) error {
	return db.Transaction(fn)
}

// VersionTableSQL creates the table with a text applied_at.
func (Driver) VersionTableSQL(table string) string {
	return sqldriver.VersionTableSQL(table, "TEXT NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now'))")
}
