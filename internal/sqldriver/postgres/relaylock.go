package postgres

import (
	"context"
	"database/sql"
)

// The relay lock is a session-level advisory lock whose 64-bit key hashes
// the current schema and the table name: advisory locks are per database,
// and one database may hold outboxes in several schemas (PostgreSQL 11+).
const relayLockKey = "hashtextextended(current_schema() || '.gorm-outbox:' || $1, 0)"

// HasRelayLock is true: pg_try_advisory_lock.
func (Driver) HasRelayLock() bool { return true }

// TryRelayLock is pg_try_advisory_lock.
func (Driver) TryRelayLock(ctx context.Context, conn *sql.Conn, table string) (bool, error) {
	var ok bool
	err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock("+relayLockKey+")", table).Scan(&ok)
	return ok, err
}

// RelayUnlock is pg_advisory_unlock.
func (Driver) RelayUnlock(ctx context.Context, conn *sql.Conn, table string) error {
	_, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock("+relayLockKey+")", table)
	return err
}

// Session is pg_backend_pid().
func (Driver) Session(ctx context.Context, conn *sql.Conn) (int64, error) {
	var id int64
	err := conn.QueryRowContext(ctx, "SELECT pg_backend_pid()").Scan(&id)
	return id, err
}
