package relay

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/gormoutbox/outbox/internal/dialect"
)

// advisoryLock is the per-database half of WithSingleActive: a lock named
// after the outbox table, held by one database session (the *sql.Conn the
// lock is taken on) until it is unlocked or the session ends.
type advisoryLock interface {
	// tryLock takes the lock on conn without waiting; it reports false
	// when another session holds it.
	tryLock(ctx context.Context, conn *sql.Conn) (bool, error)
	// unlock releases the lock held by conn.
	unlock(ctx context.Context, conn *sql.Conn) error
	// session returns conn's session id (pg_backend_pid, CONNECTION_ID).
	session(ctx context.Context, conn *sql.Conn) (int64, error)
}

// newAdvisoryLock returns the lock of table on kind's database, or nil on
// SQLite, which needs none: its single writer runs one relay anyway.
func newAdvisoryLock(kind dialect.Kind, table string) advisoryLock {
	switch kind {
	case dialect.Postgres:
		return pgAdvisoryLock{name: "gorm-outbox:" + table}
	case dialect.MySQL:
		return mysqlAdvisoryLock{name: "gorm-outbox:" + table}
	default:
		return nil
	}
}

// pgAdvisoryLock is a session-level pg_try_advisory_lock whose 64-bit
// key hashes the current schema and the table name: advisory locks are
// per database, and one database may hold outboxes in several schemas.
type pgAdvisoryLock struct{ name string }

const pgLockKey = "hashtextextended(current_schema() || '.' || $1, 0)"

func (l pgAdvisoryLock) tryLock(ctx context.Context, conn *sql.Conn) (bool, error) {
	var ok bool
	err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock("+pgLockKey+")", l.name).Scan(&ok)
	return ok, err
}

func (l pgAdvisoryLock) unlock(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock("+pgLockKey+")", l.name)
	return err
}

func (pgAdvisoryLock) session(ctx context.Context, conn *sql.Conn) (int64, error) {
	var id int64
	err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&id)
	return id, err
}

// mysqlAdvisoryLock is GET_LOCK(name, 0). Its names are server-wide and
// at most 64 characters: the name is a hash of the database and the table
// ("gorm-outbox:" and 32 hex digits).
type mysqlAdvisoryLock struct{ name string }

const mysqlLockName = "CONCAT('gorm-outbox:', MD5(CONCAT(DATABASE(), '.', ?)))"

func (l mysqlAdvisoryLock) tryLock(ctx context.Context, conn *sql.Conn) (bool, error) {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+mysqlLockName+", 0)", l.name).Scan(&got); err != nil {
		return false, err
	}
	if !got.Valid {
		return false, fmt.Errorf("GET_LOCK returned NULL")
	}
	return got.Int64 == 1, nil
}

func (l mysqlAdvisoryLock) unlock(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, "DO RELEASE_LOCK("+mysqlLockName+")", l.name)
	return err
}

func (mysqlAdvisoryLock) session(ctx context.Context, conn *sql.Conn) (int64, error) {
	var id int64
	err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	return id, err
}
