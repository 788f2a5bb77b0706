// Package mysql is the sqldriver.Driver of MySQL 8 and MariaDB.
//
// DATETIME columns have no zone: the library binds and compares UTC
// (UTC_TIMESTAMP(6), never NOW(), which has second precision on MariaDB
// and follows the server's zone), whatever loc the connection reads them
// in (StoredTime).
package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Driver is MySQL's and MariaDB's sqldriver.Driver. The zero value is
// ready.
type Driver struct{}

var _ sqldriver.Driver = Driver{}

// Name returns "mysql".
func (Driver) Name() string { return "mysql" }

// DialectorNames returns the name of GORM's MySQL dialector (MariaDB's too).
func (Driver) DialectorNames() []string { return []string{"mysql"} }

// Now is UTC_TIMESTAMP(6).
func (Driver) Now() (string, []any) { return "UTC_TIMESTAMP(6)", nil }

// NowPlus is UTC_TIMESTAMP(6) plus a bound number of microseconds.
func (Driver) NowPlus(d time.Duration) (string, []any) {
	return "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND", []any{d.Microseconds()}
}

// timeLayout is a DATETIME(6) literal in UTC, independent of the driver's loc.
const timeLayout = "2006-01-02 15:04:05.000000"

// Time returns t as a UTC DATETIME(6) literal.
func (Driver) Time(t time.Time) any { return t.UTC().Format(timeLayout) }

// StoredTime takes the wall clock the driver read (in its loc, loc=Local
// is common) as the UTC the library stored.
func (Driver) StoredTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, t.Nanosecond(), time.UTC)
}

// SecondsSince is TIMESTAMPDIFF in microseconds to UTC_TIMESTAMP(6).
func (Driver) SecondsSince(expr string) string {
	return "(TIMESTAMPDIFF(MICROSECOND, (" + expr + "), UTC_TIMESTAMP(6)) / 1000000.0)"
}

// WholeMinutesSince floors SecondsSince / 60 (TIMESTAMPDIFF truncates
// toward zero).
func (d Driver) WholeMinutesSince(expr string) string {
	return "CAST(FLOOR(" + d.SecondsSince(expr) + " / 60) AS SIGNED)"
}

// InsertIgnore is ON DUPLICATE KEY UPDATE col = col: INSERT IGNORE would
// hide other errors too.
func (Driver) InsertIgnore(col string) string { return " ON DUPLICATE KEY UPDATE " + col + " = " + col }

// InsertIgnoreCounted is false: with clientFoundRows=true (a common DSN
// flag) a skipped row counts 1, as the row ON DUPLICATE KEY UPDATE found.
func (Driver) InsertIgnoreCounted() bool { return false }

// LazyCommit is "": InnoDB's flush at commit is a global setting.
func (Driver) LazyCommit() string { return "" }

// ByID forces the primary key (see sqldriver.Statements.ByID).
func (Driver) ByID(table string) string { return table + " FORCE INDEX (PRIMARY)" }

// IDList is col IN (?, …).
func (Driver) IDList(col string, ids []int64) (string, []any) { return sqldriver.InList(col, ids) }

// Upsert is ON DUPLICATE KEY UPDATE c = VALUES(c), ….
func (Driver) Upsert(_ string, cols ...string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = VALUES(" + c + ")"
	}
	return " ON DUPLICATE KEY UPDATE " + strings.Join(set, ", ")
}

// CheckConn requires parseTime=true: a DATETIME comes back as time.Time
// with it, as text without it (which GORM cannot read into a time.Time).
// The driver's loc may be anything (see StoredTime).
func (Driver) CheckConn(db *gorm.DB) error {
	var v any
	err := db.Session(&gorm.Session{NewDB: true}).Raw("SELECT CAST('2000-01-01 00:00:00' AS DATETIME)").Row().Scan(&v)
	if err != nil {
		return fmt.Errorf("outbox: probing the MySQL connection's settings: %w", err)
	}
	if _, ok := v.(time.Time); !ok {
		return sqldriver.ErrNoParseTime
	}
	return nil
}

// TableExists looks table up in the current database.
func (Driver) TableExists(db *gorm.DB, table string) (bool, error) {
	var n int
	err := db.Raw("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?", table).Row().Scan(&n)
	return n > 0, err
}

// MissingTable reports error 1146 (ER_NO_SUCH_TABLE, MySQL and MariaDB),
// read from the message of the go-sql-driver error ("Error 1146
// (42S02): Table … doesn't exist") anywhere in err's chain, so that this
// package needs no MySQL client.
func (Driver) MissingTable(err error) bool {
	for ; err != nil; err = errors.Unwrap(err) {
		if strings.HasPrefix(err.Error(), "Error 1146 ") || strings.HasPrefix(err.Error(), "Error 1146:") {
			return true
		}
	}
	return false
}

// EstimatedRows is not ok: InnoDB's TABLE_ROWS is a sample that can be off by
// half: callers count.
func (Driver) EstimatedRows(*gorm.DB, string) (int64, bool, error) { return 0, false, nil }

// GormTable returns name: MySQL does not fold unquoted names.
func (Driver) GormTable(name string) string { return name }

// OutboxTables are the table, its heartbeats table and <table>_keys,
// which orders the writers of a partition key (LockKeys).
func (Driver) OutboxTables(table string) []string {
	return []string{table, table + "_relays", table + "_keys"}
}

var insert = sqldriver.EventInsert{Clock: Driver{}, Conflict: Driver{}.InsertIgnore("event_id")}

// InsertEvents inserts the rows in one statement, available_at DEFAULT
// where the row has none.
func (Driver) InsertEvents(tx *gorm.DB, p sqldriver.InsertEventsParams) (int64, error) {
	return insert.Exec(tx, p)
}

// InsertCountsRows is false: ON DUPLICATE KEY UPDATE reports a duplicate
// as 0 rows, or as 1 with the clientFoundRows DSN flag.
func (Driver) InsertCountsRows() bool { return false }

// SnapshotAfterUpdate is true: under REPEATABLE READ InnoDB keeps a row
// an UPDATE matched without changing it out of the transaction's own
// writes, so that a plain read returns the snapshot's version.
func (Driver) SnapshotAfterUpdate() bool { return true }

// BeginWrite does nothing: writers lock rows.
func (Driver) BeginWrite(tx *gorm.DB, table string) error { return nil }

// LockKeys upserts a row per key of <table>_keys, in key order: the row
// lock is held until the transaction ends. Many keys are locked in
// statements of sqldriver.KeyLockChunk keys each (a bind parameter a key,
// within the 65,535 of a statement), one after the other in key order, so
// that every transaction takes its locks in one order and none can
// deadlock another.
func (Driver) LockKeys(tx *gorm.DB, p sqldriver.LockKeysParams) error {
	if len(p.Keys) == 0 {
		return nil
	}
	keys := slices.Clone(p.Keys)
	slices.Sort(keys)
	keys = slices.Compact(keys)
	for len(keys) > 0 {
		n := min(len(keys), sqldriver.KeyLockChunk)
		if err := lockKeyRows(tx, p.Table, keys[:n]); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

// lockKeyRows upserts the rows of keys, sorted, in one statement.
func lockKeyRows(tx *gorm.DB, table string, keys []string) error {
	var sql strings.Builder
	args := make([]any, 0, len(keys))
	sql.WriteString("INSERT INTO " + table + "_keys (partition_key, locked_at) VALUES ")
	for i, k := range keys {
		if i > 0 {
			sql.WriteString(", ")
		}
		sql.WriteString("(?, UTC_TIMESTAMP(6))")
		args = append(args, k)
	}
	sql.WriteString(" ON DUPLICATE KEY UPDATE locked_at = UTC_TIMESTAMP(6)")
	return tx.Exec(sql.String(), args...).Error
}

// FindEvents reads plainly, and with p.Latest with LOCK IN SHARE MODE:
// InnoDB's REPEATABLE READ reads the transaction's snapshot, which may
// predate a row another transaction committed under the same id; a shared
// locking read sees the latest committed row (MariaDB has no FOR SHARE).
// The locking read is kept for the ids the plain one missed: it locks the
// gap before each id as well (even a unique key's equality takes a
// next-key lock on MariaDB), and two writers that inserted into the gaps
// the other had read deadlocked.
func (Driver) FindEvents(tx *gorm.DB, p sqldriver.FindEventsParams, dest any) error {
	if p.Latest {
		return sqldriver.FindEvents(tx, p, " LOCK IN SHARE MODE", dest)
	}
	return sqldriver.FindEvents(tx, p, "", dest)
}

// InsertKey inserts with ON DUPLICATE KEY UPDATE. A count of 0 is a
// duplicate; a count of 1 may be one too (clientFoundRows=true): the row
// is ours if it holds our token. The insert locked the row, so a locking
// read sees it as committed or as this transaction wrote it.
func (d Driver) InsertKey(db *gorm.DB, p sqldriver.InsertKeyParams) (bool, error) {
	q, args := sqldriver.InsertKey(d, p, false, d.InsertIgnore("idempotency_key"))
	res := db.Exec(q, args...)
	if res.Error != nil || res.RowsAffected == 0 {
		return false, res.Error
	}
	var got []string
	if err := db.Raw("SELECT token FROM "+p.Table+" WHERE idempotency_key = ? FOR UPDATE", p.Key).Scan(&got).Error; err != nil {
		return false, err
	}
	return len(got) == 1 && got[0] == p.Token, nil
}

// TakeOverKey is the shared conditional UPDATE.
func (d Driver) TakeOverKey(db *gorm.DB, p sqldriver.TakeOverKeyParams) (bool, error) {
	return sqldriver.TakeOverKey(db, d, p)
}

// DeletePublished is the shared SELECT of ids and DELETE by id.
func (d Driver) DeletePublished(ctx context.Context, db *gorm.DB, p sqldriver.DeletePublishedParams) (int, int64, error) {
	return sqldriver.DeletePublished(ctx, db, d, p)
}

// PruneKeyLocks deletes rows of <table>_keys not locked for olderThan, in
// a READ COMMITTED transaction: a locking read that skips the rows writers
// hold, then a DELETE of the rows it locked. No index serves locked_at (a
// writer would update it on every lock), so the read scans the table;
// under READ COMMITTED it keeps the locks of the rows it deletes only. (A
// DELETE … WHERE locked_at < … under REPEATABLE READ locked every row it
// scanned and waited for any row a writer held, and the writers of the
// rows it had passed waited behind it.)
func (Driver) PruneKeyLocks(ctx context.Context, db *gorm.DB, table string, olderThan time.Duration, limit int) (int64, error) {
	var n int64
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var keys []string
		err := tx.Raw("SELECT partition_key FROM "+table+"_keys WHERE locked_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND LIMIT ? FOR UPDATE SKIP LOCKED",
			olderThan.Microseconds(), limit).Scan(&keys).Error
		if err != nil || len(keys) == 0 {
			return err
		}
		res := tx.Exec("DELETE FROM "+table+"_keys WHERE partition_key IN ?", keys)
		n = res.RowsAffected
		return res.Error
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	return n, err
}

// migrateLockName is the named lock that serialises migrations.
const migrateLockName = "gorm_outbox_migrate"

// LockMigrations runs fn on one connection holding a named lock
// (GET_LOCK, waiting up to 60s): MySQL's DDL commits itself, so there is
// no transaction to run it in.
func (Driver) LockMigrations(db *gorm.DB, fn func(tx *gorm.DB) error) error {
	return db.Connection(func(conn *gorm.DB) error {
		var got *int
		if err := conn.Raw("SELECT GET_LOCK(?, 60)", migrateLockName).Scan(&got).Error; err != nil || got == nil || *got != 1 {
			return fmt.Errorf("migration lock %s: not acquired in 60s (%v)", migrateLockName, err)
		}
		defer conn.Exec("SELECT RELEASE_LOCK(?)", migrateLockName)
		return fn(conn)
	})
}

// VersionTableSQL creates the table with a DATETIME(6) applied_at in UTC.
func (Driver) VersionTableSQL(table string) string {
	return sqldriver.VersionTableSQL(table, "DATETIME(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6))")
}
