//go:build cgo && !outbox_purego

package testdb

import (
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
)

// SQLiteDriver names the SQLite driver of this build.
const SQLiteDriver = "gorm.io/driver/sqlite (mattn/go-sqlite3, cgo)"

// SQLiteDialector opens dsn, a DSN with mattn/go-sqlite3's parameters
// (_txlock=immediate, _busy_timeout=…), with this build's SQLite driver.
func SQLiteDialector(dsn string) gorm.Dialector { return sqlite.Open(dsn) }
