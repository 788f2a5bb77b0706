//go:build !cgo

package main

import (
	sqlite "github.com/ncruces/go-sqlite3/gormlite"
	_ "github.com/ncruces/go-sqlite3/vfs/memdb" // shared in-memory databases (sqlitedsn.PureGo)
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqlitedsn"
)

// sqliteDialector opens dsn, with mattn/go-sqlite3's parameters
// (_txlock, _busy_timeout, …), with the pure-Go
// github.com/ncruces/go-sqlite3/gormlite: the SQLite driver of a build
// without cgo (CGO_ENABLED=0). Parameters that set a PRAGMA in mattn's form
// become _pragma=name(value), so that a sqlite: address means the same in
// both builds.
func sqliteDialector(dsn string) gorm.Dialector {
	pure, err := sqlitedsn.PureGo(dsn, nil)
	if err != nil {
		pure = dsn // parseSQLite has checked the query already
	}
	return sqlite.Open(pure)
}
