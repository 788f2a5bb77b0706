//go:build !cgo

package main

import (
	sqlite "github.com/ncruces/go-sqlite3/gormlite"
	"gorm.io/gorm"
)

// sqliteDialector opens a SQLite DSN given with -dsn with
// github.com/ncruces/go-sqlite3/gormlite (pure Go), the driver of a build
// without cgo; its parameters are read from a file: URI only:
// file:shop.db?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL).
func sqliteDialector(dsn string) gorm.Dialector { return sqlite.Open(dsn) }

// openSQLite opens the SQLite file at path with this build's driver.
func openSQLite(path string) gorm.Dialector {
	return sqlite.Open("file:" + path + "?_txlock=immediate&_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)")
}
