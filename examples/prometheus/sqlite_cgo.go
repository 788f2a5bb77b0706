//go:build cgo

package main

import (
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// openSQLite opens the SQLite file at path with gorm.io/driver/sqlite
// (mattn/go-sqlite3), the driver of a build with cgo.
func openSQLite(path string) gorm.Dialector {
	return sqlite.Open(path + "?_txlock=immediate&_busy_timeout=5000")
}
