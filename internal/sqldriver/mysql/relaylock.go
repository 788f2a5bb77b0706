package mysql

import (
	"context"
	"database/sql"
	"errors"
)

// relayLockName is the relay lock's GET_LOCK name: names are server-wide
// and at most 64 characters, so it hashes the database and the table
// ("gorm-outbox:" and 32 hex digits).
const relayLockName = "CONCAT('gorm-outbox:', MD5(CONCAT(DATABASE(), '.gorm-outbox:', ?)))"

// HasRelayLock is true: GET_LOCK.
func (Driver) HasRelayLock() bool { return true }

// TryRelayLock is GET_LOCK(name, 0).
func (Driver) TryRelayLock(ctx context.Context, conn *sql.Conn, table string) (bool, error) {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, "SELECT GET_LOCK("+relayLockName+", 0)", table).Scan(&got); err != nil {
		return false, err
	}
	if !got.Valid {
		return false, errors.New("GET_LOCK returned NULL")
	}
	return got.Int64 == 1, nil
}

// RelayUnlock is RELEASE_LOCK.
func (Driver) RelayUnlock(ctx context.Context, conn *sql.Conn, table string) error {
	_, err := conn.ExecContext(ctx, "DO RELEASE_LOCK("+relayLockName+")", table)
	return err
}

// Session is CONNECTION_ID().
func (Driver) Session(ctx context.Context, conn *sql.Conn) (int64, error) {
	var id int64
	err := conn.QueryRowContext(ctx, "SELECT CONNECTION_ID()").Scan(&id)
	return id, err
}
