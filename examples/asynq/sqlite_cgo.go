//go:build cgo

package main

import (
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// sqliteDialector opens a SQLite DSN given with -dsn with
// gorm.io/driver/sqlite (mattn/go-sqlite3), the driver of a build with cgo:
// file:shop.db?_txlock=immediate&_busy_timeout=10000&_journal_mode=WAL.
func sqliteDialector(dsn string) gorm.Dialector { return sqlite.Open(dsn) }

// openSQLite opens the SQLite file at path with this build's driver.
func openSQLite(path string) gorm.Dialector {
	return sqlite.Open("file:" + path + "?_txlock=immediate&_busy_timeout=10000&_journal_mode=WAL")
}
