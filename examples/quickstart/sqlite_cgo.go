//go:build cgo

package main

import (
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// openSQLite opens the SQLite file at path with gorm.io/driver/sqlite
// (mattn/go-sqlite3), the driver of a build with cgo. _txlock=immediate
// takes the write lock at BEGIN, _busy_timeout waits up to 5 s for it, and
// WAL lets readers run beside the writer.
func openSQLite(path string) gorm.Dialector {
	return sqlite.Open(path + "?_txlock=immediate&_busy_timeout=5000&_journal_mode=WAL")
}
