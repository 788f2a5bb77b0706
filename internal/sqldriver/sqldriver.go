// Package sqldriver is the seam between gorm-outbox and the databases:
// every SQL statement, expression or fact that differs between
// PostgreSQL, MySQL/MariaDB and SQLite is a method of Driver, and each
// dialect implements Driver once, in its own folder (postgres, mysql,
// sqlite). SQL that is the same on every database (built from a Driver's
// clock expressions) stays with the code that runs it.
//
// Driver is cut into one interface per concern, each method one query or
// one fact, with typed parameters (River's riverdriver and GORM's
// Dialector are the models):
//
//   - Clock: the database's notion of now, and how times are bound and read;
//   - Statements: the clauses of inserts that skip or update duplicates;
//   - Schema: connection checks, table lookups and row estimates;
//   - Writer: the write path's key locks, inserts and duplicate reads, and
//     what a read after an UPDATE sees;
//   - Idempotency: the idempotency records' insert and takeover;
//   - Claimer: the relay's claim and what the relay may assume of the database;
//   - Retention: pruning what the write path leaves behind;
//   - Migration: serialising migrators, and the version table;
//   - AttemptLog: the attempt records written with a completion.
//
// Adding a dialect means a new folder implementing Driver, an entry in
// package dialect's list of drivers, migration files under
// migrations/<Name()>, and the conformance suite (package drivertest)
// passing on the new database.
package sqldriver

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"gorm.io/gorm"
)

// Driver is everything about one SQL dialect that the library needs.
// Implementations are stateless values, safe for concurrent use.
type Driver interface {
	// Name is the dialect's name: "postgres", "mysql" or "sqlite", the
	// folder of its migration files.
	Name() string
	// DialectorNames are the gorm.Dialector names (Dialector.Name()) that
	// this driver serves.
	DialectorNames() []string

	Clock
	Statements
	Schema
	Writer
	Idempotency
	Claimer
	Retention
	Migration
	AttemptLog
	RelayLocker
}

// RelayLocker is the lock of relay.WithSingleActive: one per outbox table,
// held by one database session (the *sql.Conn it was taken on) until it
// is unlocked or the session ends, so that a relay that dies loses it.
type RelayLocker interface {
	// HasRelayLock reports whether the database has such a lock. Without
	// one (SQLite: a single writer runs one relay anyway) a relay is
	// always active, and the other methods are not called.
	HasRelayLock() bool
	// TryRelayLock takes table's lock on conn without waiting; it reports
	// false when another session holds it.
	TryRelayLock(ctx context.Context, conn *sql.Conn, table string) (bool, error)
	// RelayUnlock releases table's lock held by conn.
	RelayUnlock(ctx context.Context, conn *sql.Conn, table string) error
	// Session returns conn's session id (pg_backend_pid, CONNECTION_ID),
	// the one to terminate to take the lock away.
	Session(ctx context.Context, conn *sql.Conn) (int64, error)
}

// Clock is how a dialect says "now" by the database clock, and how times
// are bound to and read from its time columns.
type Clock interface {
	// Now returns an SQL expression for the current time by the database
	// clock, and its arguments. A database without a server clock (SQLite)
	// binds the process clock.
	Now() (string, []any)
	// NowPlus returns an SQL expression for Now plus d, and its arguments.
	NowPlus(d time.Duration) (string, []any)
	// Time returns t as a value to bind where the database compares it
	// with Now (text ordered as times on SQLite, a zone-less UTC literal on
	// MySQL).
	Time(t time.Time) any
	// StoredTime returns the instant that a time column the library wrote
	// holds, given the value the database driver scanned from it.
	StoredTime(t time.Time) time.Time
	// SecondsSince returns an SQL expression for the seconds elapsed since
	// the time expression expr, by the database clock.
	SecondsSince(expr string) string
	// WholeMinutesSince returns an SQL expression for the whole minutes
	// (rounded down) elapsed since the time expression expr, by the
	// database clock, as an integer.
	WholeMinutesSince(expr string) string
}

// Statements are the clauses of inserts that meet an existing row.
type Statements interface {
	// InsertIgnore returns the clause that makes an INSERT skip rows whose
	// unique column col already holds the value, without failing the
	// transaction and without hiding other errors.
	InsertIgnore(col string) string
	// InsertIgnoreCounted reports whether the affected-row count of an
	// InsertIgnore statement tells an inserted row (1) from a skipped one
	// (0) whatever the connection's settings (not on MySQL with
	// clientFoundRows=true, where a skipped row counts 1).
	InsertIgnoreCounted() bool
	// Upsert returns the clause that makes an INSERT update cols, to the
	// values it tried to insert, when a row with the same key column exists.
	Upsert(key string, cols ...string) string
	// LazyCommit returns an SQL condition, always true, whose evaluation
	// in a statement makes the transaction that runs it commit without
	// waiting for its commit record to reach disk, where the database lets
	// one transaction choose (PostgreSQL: synchronous_commit off for that
	// transaction only); "" where it does not. The relay adds it to its own
	// bookkeeping (claims, completions), which a database crash may undo
	// at the price of a redelivery, never of an event.
	LazyCommit() string
	// ByID returns how a statement that reaches rows by their ids (an
	// IDList on id) names table: on MySQL "table FORCE INDEX (PRIMARY)",
	// elsewhere table. MySQL's optimizer may otherwise read those rows
	// through an index that leads with status, or scan the whole primary
	// key, and an UPDATE locks every entry it reads and the gaps between
	// them: the rows of other batches and the range where claims mark
	// theirs, so that claims skip or wait for rows the statement does not
	// change.
	ByID(table string) string
	// IDList returns the condition "col is one of ids" and its arguments,
	// for one or more ids. Where the database takes an array parameter
	// (PostgreSQL), the text is the same whatever the number of ids, so
	// that a prepared statement serves every batch size; elsewhere it is
	// col IN (?, …).
	IDList(col string, ids []int64) (string, []any)
}

// ErrNoParseTime is returned by Schema.CheckConn for a MySQL connection
// opened without parseTime=true.
var ErrNoParseTime = errors.New("the MySQL DSN lacks parseTime=true: the driver returns DATETIME columns as text, " +
	"which GORM cannot read into time.Time; add parseTime=true to the DSN (any loc works)")

// Schema checks connections and looks tables up.
type Schema interface {
	// CheckConn returns an error (such as ErrNoParseTime) when db's
	// connection settings do not suit the library, and a wrapped error
	// when it cannot ask; nil otherwise.
	CheckConn(db *gorm.DB) error
	// TableExists reports whether table exists, looked up as the
	// library's SQL names it: unquoted.
	TableExists(db *gorm.DB, table string) (bool, error)
	// OutboxTables returns the tables that the migrations of the outbox
	// table named table create: at least the table and <table>_relays.
	OutboxTables(table string) []string
	// GormTable returns name as GORM's Table must be given it (GORM quotes
	// it) to reach the table that the library's SQL names unquoted.
	GormTable(name string) string
	// EstimatedRows returns the planner's estimate of table's rows, read
	// from the statistics the database keeps up to date by itself, without
	// reading the table (PostgreSQL: pg_class.reltuples, refreshed by
	// autovacuum and ANALYZE). ok is false where the database keeps no
	// such estimate worth showing (MySQL's TABLE_ROWS can be off by half;
	// SQLite keeps none unless ANALYZE was run) or the table was never
	// analyzed: callers then count.
	EstimatedRows(db *gorm.DB, table string) (n int64, ok bool, err error)
	// MissingTable reports whether err, returned by a statement, says
	// that a table the statement names does not exist: the database was
	// not migrated. It reads the error alone (no statement runs), so that
	// the write path names the fix at no cost when the table exists.
	MissingTable(err error) bool
}

// EventRow is one event to insert. Payload and Headers are bound as
// given (the write path binds types its logger redacts); AvailableAt nil
// means now by the database clock.
type EventRow struct {
	EventID, Type                        string
	Version                              int
	TenantID, AggregateType, AggregateID string
	PartitionKey, Topic                  string
	Payload, Headers                     any
	MaxAttempts                          int
	AvailableAt                          *time.Time
}

// InsertEventsParams are the parameters of Writer.InsertEvents.
type InsertEventsParams struct {
	Table string
	Rows  []EventRow
	// SkipDuplicates makes rows whose event_id exists skipped instead of
	// failing the statement.
	SkipDuplicates bool
	// Now is the process time, for the columns a database without a
	// server clock cannot default.
	Now time.Time
}

// KeyLockChunk is the most keys a driver locks in one statement of
// Writer.LockKeys: one Emit may carry any number of keys, and a statement
// takes at most 65,535 bind parameters (PostgreSQL, MySQL). Larger sets
// are locked in several statements, in the same fixed order.
const KeyLockChunk = 1000

// LockKeysParams are the parameters of Writer.LockKeys.
type LockKeysParams struct {
	Table string
	// Keys are the partition keys, non-empty, in any order, repeats allowed.
	Keys []string
}

// FindEventsParams are the parameters of Writer.FindEvents.
type FindEventsParams struct {
	Table   string
	Columns string // a column list of the outbox table
	IDs     []string
	// Latest reads the latest committed rows even where tx reads a
	// snapshot that may be older. The writer sets it only for the ids a
	// read without it did not find: on MySQL it is a locking read, which
	// locks the gap before each id read.
	Latest bool
}

// Writer is the write path's SQL.
type Writer interface {
	// InsertEvents inserts p.Rows in one statement through tx and returns
	// the affected-row count. Where the database can wake relays
	// (Claimer.Listens), the statement also does, once the transaction
	// commits.
	InsertEvents(tx *gorm.DB, p InsertEventsParams) (int64, error)
	// InsertCountsRows reports whether InsertEvents's count is the number
	// of rows inserted, skipped duplicates not counted.
	InsertCountsRows() bool
	// LockKeys serialises, until tx ends, the transactions that lock the
	// same partition key of the table. Keys are locked in a fixed order,
	// so that two transactions locking the same keys cannot deadlock, and
	// any number of keys is taken (in several statements, in that order,
	// beyond KeyLockChunk). A database with a single writer may do nothing.
	LockKeys(tx *gorm.DB, p LockKeysParams) error
	// FindEvents reads the columns of the rows with the event ids into
	// dest. It sees the rows tx wrote and those committed before tx's
	// snapshot; with p.Latest, also those committed since (a row another
	// transaction inserted under the same id).
	FindEvents(tx *gorm.DB, p FindEventsParams, dest any) error
	// SnapshotAfterUpdate reports whether a plain read, in a transaction
	// that has just run an UPDATE, may return a row the UPDATE matched
	// but left as it was as of the transaction's snapshot instead of as
	// stored (InnoDB under REPEATABLE READ); a locking read returns it as
	// stored. False: a plain read returns every row the UPDATE matched as
	// stored (PostgreSQL writes a new version of each; SQLite has one
	// writer). Track reads the rows a statement wrote with it.
	SnapshotAfterUpdate() bool
	// BeginWrite makes tx's transaction a writer of the database holding
	// table (the outbox table) now,
	// where a read would start one that cannot become a writer once
	// another writer commits (SQLite's deferred transactions: the write
	// then fails with "database is locked" whatever the busy timeout). It
	// waits, as a write would, for the writer holding the lock. Track
	// calls it before the reads it makes ahead of a write. Where writers
	// lock rows (PostgreSQL, MySQL) it does nothing.
	BeginWrite(tx *gorm.DB, table string) error
}

// InsertKeyParams are the parameters of Idempotency.InsertKey.
type InsertKeyParams struct {
	// Token must be unique to the call: it tells the caller's record from
	// another's.
	Table, Key, Status, Token string
	// LockedFor sets locked_until to now plus LockedFor; 0 leaves it NULL.
	LockedFor time.Duration
	// Life sets expires_at to now plus Life.
	Life time.Duration
}

// TakeOverKeyParams are the parameters of Idempotency.TakeOverKey.
type TakeOverKeyParams struct {
	Table, Key string
	// Status and Token are what the record holds after the takeover.
	Status, Token string
	// LockedFor sets locked_until to now plus LockedFor; 0 sets NULL.
	LockedFor time.Duration
	// Life sets expires_at to now plus Life.
	Life time.Duration
}

// Idempotency is the SQL of package idempotency that differs by dialect.
type Idempotency interface {
	// InsertKey inserts a record of p.Key unless one exists, and reports
	// whether this call inserted it (true only when the record holds
	// p.Token), whatever the connection's settings.
	InsertKey(db *gorm.DB, p InsertKeyParams) (bool, error)
	// TakeOverKey takes over the record of p.Key from a holder whose lease
	// expired (status running, locked_until passed), and reports whether it
	// did: a record that is not running, or whose lease lasts, is left
	// alone.
	TakeOverKey(db *gorm.DB, p TakeOverKeyParams) (bool, error)
}

// DeletePublishedParams are the parameters of Retention.DeletePublished.
type DeletePublishedParams struct {
	Table string
	// OlderThan: rows published longer ago than this, by the database
	// clock, are deleted.
	OlderThan time.Duration
	// Limit is the most rows one call deletes.
	Limit int
	// Attempts is the attempt log table whose records of the deleted
	// events are deleted with them, in the same transaction ("": none).
	Attempts string
}

// Retention deletes delivered events and prunes what the write path
// leaves behind besides events.
type Retention interface {
	// DeletePublished deletes at most p.Limit published events of
	// p.Table whose published_at is older than p.OlderThan, oldest
	// published first, and nothing else but their attempt records
	// (p.Attempts). It reads the published index (migration 0006): the cost
	// of a call is that of the rows it deletes, however much younger
	// history the table holds. It returns how many old published events it
	// found (found < p.Limit: there are no more) and how many it deleted.
	DeletePublished(ctx context.Context, db *gorm.DB, p DeletePublishedParams) (found int, deleted int64, err error)
	// PruneKeyLocks deletes at most limit partition-key lock rows of the
	// table not used for olderThan, where the dialect keeps such rows, and
	// returns how many it deleted.
	PruneKeyLocks(ctx context.Context, db *gorm.DB, table string, olderThan time.Duration, limit int) (int64, error)
}

// Migration serialises migrators and records what they applied.
type Migration interface {
	// LockMigrations runs fn serialised with every other LockMigrations
	// of the database: in one transaction where DDL is transactional,
	// else on one connection holding a lock. fn gets the transaction or
	// connection to run the migrations through.
	LockMigrations(db *gorm.DB, fn func(tx *gorm.DB) error) error
	// VersionTableSQL returns the CREATE TABLE IF NOT EXISTS statement of
	// the migrations' version table named table, with columns target and
	// name (its primary key) and applied_at.
	VersionTableSQL(table string) string
}
