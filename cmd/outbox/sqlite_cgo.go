//go:build cgo

package main

import (
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// sqliteDialector opens dsn, with mattn/go-sqlite3's parameters
// (_txlock, _busy_timeout, …), with gorm.io/driver/sqlite: the SQLite driver
// of a build with cgo.
func sqliteDialector(dsn string) gorm.Dialector { return sqlite.Open(dsn) }
