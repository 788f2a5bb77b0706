//go:build cgo

package workload

import (
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// sqliteDialector opens dsn (mattn/go-sqlite3's parameters) with
// gorm.io/driver/sqlite, the driver of a build with cgo.
func sqliteDialector(dsn string) gorm.Dialector { return sqlite.Open(dsn) }
