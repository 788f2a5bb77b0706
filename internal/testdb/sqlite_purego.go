//go:build !cgo || outbox_purego

package testdb

import (
	sqlite "github.com/ncruces/go-sqlite3/gormlite"
	_ "github.com/ncruces/go-sqlite3/vfs/memdb" // shared in-memory databases (sqlitedsn.PureGo)
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqlitedsn"
)

// SQLiteDriver names the SQLite driver of this build.
const SQLiteDriver = "github.com/ncruces/go-sqlite3/gormlite (pure Go)"

// SQLiteDialector opens dsn, a DSN with mattn/go-sqlite3's parameters
// (_txlock=immediate, _busy_timeout=…), with this build's SQLite driver: its
// PRAGMA parameters become the pure-Go driver's _pragma=name(value).
func SQLiteDialector(dsn string) gorm.Dialector {
	pure, err := sqlitedsn.PureGo(dsn, nil)
	if err != nil {
		panic("testdb: SQLite DSN " + dsn + ": " + err.Error())
	}
	return sqlite.Open(pure)
}
