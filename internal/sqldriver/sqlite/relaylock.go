package sqlite

import (
	"context"
	"database/sql"
)

// HasRelayLock is false: a single writer runs one relay anyway.
func (Driver) HasRelayLock() bool { return false }

// TryRelayLock is never called (HasRelayLock); it reports the lock taken.
func (Driver) TryRelayLock(context.Context, *sql.Conn, string) (bool, error) { return true, nil }

// RelayUnlock does nothing.
func (Driver) RelayUnlock(context.Context, *sql.Conn, string) error { return nil }

// Session is 0: one process.
func (Driver) Session(context.Context, *sql.Conn) (int64, error) { return 0, nil }
