//go:build !cgo

package main

import (
	"github.com/glebarez/sqlite"
	"gorm.io/gorm"
)

// sqliteDialector opens a SQLite DSN given with -dsn with
// github.com/glebarez/sqlite (pure Go), the driver of a build without cgo:
// file:shop.db?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL).
func sqliteDialector(dsn string) gorm.Dialector { return sqlite.Open(dsn) }

// openSQLite opens the SQLite file at path with this build's driver.
func openSQLite(path string) gorm.Dialector {
	return sqlite.Open("file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
}
