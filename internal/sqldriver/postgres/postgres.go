// Package postgres is the sqldriver.Driver of PostgreSQL.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Driver is PostgreSQL's sqldriver.Driver. The zero value is ready.
type Driver struct{}

var _ sqldriver.Driver = Driver{}

// Name returns "postgres".
func (Driver) Name() string { return "postgres" }

// DialectorNames returns the names of GORM's PostgreSQL dialectors.
func (Driver) DialectorNames() []string { return []string{"postgres", "pgx"} }

// Now is clock_timestamp(): the time of the statement, not of the
// transaction's start (now()).
func (Driver) Now() (string, []any) { return "clock_timestamp()", nil }

// NowPlus is clock_timestamp() plus a bound number of microseconds.
func (Driver) NowPlus(d time.Duration) (string, []any) {
	return "clock_timestamp() + ? * interval '1 microsecond'", []any{d.Microseconds()}
}

// Time returns t: timestamptz stores an instant.
func (Driver) Time(t time.Time) any { return t }

// StoredTime returns t: timestamptz stores an instant.
func (Driver) StoredTime(t time.Time) time.Time { return t }

// SecondsSince subtracts expr from clock_timestamp().
func (Driver) SecondsSince(expr string) string {
	return "EXTRACT(EPOCH FROM (clock_timestamp() - (" + expr + ")))"
}

// WholeMinutesSince floors SecondsSince / 60.
func (d Driver) WholeMinutesSince(expr string) string {
	return "CAST(FLOOR(" + d.SecondsSince(expr) + " / 60) AS BIGINT)"
}

// InsertIgnore is ON CONFLICT (col) DO NOTHING.
func (Driver) InsertIgnore(col string) string { return " ON CONFLICT (" + col + ") DO NOTHING" }

// InsertIgnoreCounted is true: a skipped row counts 0.
func (Driver) InsertIgnoreCounted() bool { return true }

// LazyCommit sets synchronous_commit off for the statement's transaction
// (set_config with is_local): its commit returns before the WAL flush. The
// session's setting is untouched.
func (Driver) LazyCommit() string {
	return "(SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL"
}

// ByID names table as it is: the planner reads rows by an id list through
// the primary key.
func (Driver) ByID(table string) string { return table }

// IDList is col = ANY(CAST(? AS bigint[])), with the ids as one array
// literal: one statement text for any number of ids.
func (Driver) IDList(col string, ids []int64) (string, []any) {
	return col + " = ANY(CAST(? AS bigint[]))", []any{sqldriver.ArrayLiteral(ids)}
}

// Upsert is ON CONFLICT (key) DO UPDATE SET c = excluded.c, ….
func (Driver) Upsert(key string, cols ...string) string {
	set := make([]string, len(cols))
	for i, c := range cols {
		set[i] = c + " = excluded." + c
	}
	return " ON CONFLICT (" + key + ") DO UPDATE SET " + strings.Join(set, ", ")
}

// CheckConn accepts any connection.
func (Driver) CheckConn(*gorm.DB) error { return nil }

// TableExists resolves table as a query would (to_regclass): folded to
// lower case, through the search_path.
func (Driver) TableExists(db *gorm.DB, table string) (bool, error) {
	var n int
	err := db.Raw("SELECT CASE WHEN to_regclass(?) IS NULL THEN 0 ELSE 1 END", table).Row().Scan(&n)
	return n == 1, err
}

// EstimatedRows reads pg_class.reltuples (-1 until the table is first
// vacuumed or analyzed: not ok).
// MissingTable reports SQLSTATE 42P01 (undefined_table), read through
// the SQLState method of pgx's error, so that this package needs no
// PostgreSQL client.
func (Driver) MissingTable(err error) bool {
	var state interface{ SQLState() string }
	return errors.As(err, &state) && state.SQLState() == "42P01"
}

func (Driver) EstimatedRows(db *gorm.DB, table string) (int64, bool, error) {
	var n *float64
	if err := db.Raw("SELECT reltuples FROM pg_class WHERE oid = to_regclass(?)", table).Row().Scan(&n); err != nil {
		return 0, false, err
	}
	if n == nil || *n < 0 {
		return 0, false, nil
	}
	return int64(*n), true, nil
}

// GormTable lower-cases name: PostgreSQL folds an unquoted name to
// lower case (OrderEvents is the table orderevents), a quoted one not.
func (Driver) GormTable(name string) string { return strings.ToLower(name) }

// OutboxTables are the table and its heartbeats table.
func (Driver) OutboxTables(table string) []string { return []string{table, table + "_relays"} }

var insert = sqldriver.EventInsert{Clock: Driver{}, Conflict: Driver{}.InsertIgnore("event_id")}

// InsertEvents inserts the rows in one statement, available_at DEFAULT
// (now()) where the row has none, and in the same statement NOTIFYs the
// table's channel (its name as written), which PostgreSQL delivers to the
// listening relays when the transaction commits, and never if it rolls
// back. The NOTIFY is an uncorrelated subquery of RETURNING, an InitPlan
// that runs once however many rows the statement inserts, and not at all
// when it inserts none (every row a skipped duplicate).
//
// The statement wakes the relays itself rather than a trigger: a
// trigger's PL/pgSQL call cost each writing transaction 20-40 µs more
// (migration 0008 drops it). Nor is it wrapped in a CTE (WITH i AS
// (INSERT …) SELECT count(*) FROM i, (SELECT pg_notify(…))): that plan's
// Aggregate, join and CTE scan cost 5-20 µs of server CPU per
// transaction to set up, which RETURNING does not.
func (Driver) InsertEvents(tx *gorm.DB, p sqldriver.InsertEventsParams) (int64, error) {
	q, args := insert.Build(p)
	res := tx.Exec(q+" RETURNING (SELECT pg_notify(?, ''))", append(args, p.Table)...)
	return res.RowsAffected, res.Error
}

// InsertCountsRows is true: ON CONFLICT DO NOTHING counts inserted rows.
func (Driver) InsertCountsRows() bool { return true }

// SnapshotAfterUpdate is false: an UPDATE writes a new version of every
// row it matches, which the transaction's later reads see.
func (Driver) SnapshotAfterUpdate() bool { return false }

// BeginWrite does nothing: writers lock rows.
func (Driver) BeginWrite(tx *gorm.DB, table string) error { return nil }

// LockKeys takes transaction-scoped advisory locks, released by COMMIT
// or ROLLBACK, no table: first the table's key space, shared, then one
// lock per key, exclusive: class the hash of the table, key the hash of
// the key (a collision only makes two keys share a lock), in ascending
// order of the hashes, in one statement. A transaction locking more than
// sqldriver.KeyLockChunk keys takes the table's key space exclusive
// instead, one lock that waits for, and holds back, every writer of a
// key of the table: PostgreSQL's lock table holds about 64 locks per
// connection (max_locks_per_transaction) for all sessions, which tens of
// thousands of key locks would exhaust ("out of shared memory"), for
// other sessions too. The key space comes first in every transaction and
// the keys in one order, so that none can deadlock another (a transaction
// that locked a few keys and then locks very many waits for the other
// writers of the table to end, and two that do so at once deadlock:
// PostgreSQL detects it and fails one).
func (Driver) LockKeys(tx *gorm.DB, p sqldriver.LockKeysParams) error {
	if len(p.Keys) == 0 {
		return nil
	}
	space := hash("gorm-outbox-keys:" + p.Table)
	hashes := make([]int32, len(p.Keys))
	for i, k := range p.Keys {
		hashes[i] = hash(k)
	}
	slices.Sort(hashes)
	hashes = slices.Compact(hashes)
	if len(hashes) > sqldriver.KeyLockChunk {
		return tx.Exec("SELECT pg_advisory_xact_lock(?::integer, 0)", space).Error
	}
	class := hash("gorm-outbox:" + p.Table)
	var sql strings.Builder
	args := make([]any, 0, 1+2*len(hashes))
	sql.WriteString("SELECT CASE WHEN l.o = 0 THEN pg_advisory_xact_lock_shared(l.c, l.k) ELSE pg_advisory_xact_lock(l.c, l.k) END FROM (VALUES (0, ?::integer, 0)")
	args = append(args, space)
	for _, h := range hashes {
		sql.WriteString(", (1, ?::integer, ?::integer)")
		args = append(args, class, h)
	}
	sql.WriteString(") AS l(o, c, k) ORDER BY l.o, l.k")
	return tx.Exec(sql.String(), args...).Error
}

func hash(s string) int32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return int32(h.Sum32())
}

// FindEvents reads plainly: READ COMMITTED sees the latest committed
// rows already, and under REPEATABLE READ a conflicting insert fails
// with a serialization error before the read.
func (Driver) FindEvents(tx *gorm.DB, p sqldriver.FindEventsParams, dest any) error {
	return sqldriver.FindEvents(tx, p, "", dest)
}

// InsertKey inserts with ON CONFLICT DO NOTHING, whose count tells.
func (d Driver) InsertKey(db *gorm.DB, p sqldriver.InsertKeyParams) (bool, error) {
	q, args := sqldriver.InsertKey(d, p, false, d.InsertIgnore("idempotency_key"))
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

// PruneKeyLocks does nothing: advisory locks leave no rows.
func (Driver) PruneKeyLocks(context.Context, *gorm.DB, string, time.Duration, int) (int64, error) {
	return 0, nil
}

// migrateLock is the advisory lock that serialises migrations.
const migrateLock int64 = 0x676f726d6f7574 // "gormout"

// LockMigrations runs fn in one transaction (PostgreSQL's DDL is
// transactional) holding an advisory lock, so that concurrent CREATE …
// IF NOT EXISTS do not collide and a trigger is never seen missing.
func (Driver) LockMigrations(db *gorm.DB, fn func(tx *gorm.DB) error) error {
	return db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", migrateLock).Error; err != nil {
			return fmt.Errorf("migration lock: %w", err)
		}
		return fn(tx)
	})
}

// VersionTableSQL creates the table with a TIMESTAMPTZ applied_at.
func (Driver) VersionTableSQL(table string) string {
	return sqldriver.VersionTableSQL(table, "TIMESTAMPTZ NOT NULL DEFAULT now()")
}
