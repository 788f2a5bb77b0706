//go:build !cgo

package main

import (
	sqlite "github.com/ncruces/go-sqlite3/gormlite"
	"gorm.io/gorm"
)

// openSQLite opens the SQLite file at path with
// github.com/ncruces/go-sqlite3/gormlite (pure Go), the driver of a build
// without cgo (CGO_ENABLED=0). The same settings as sqlite_cgo.go in this
// driver's form: a file: URI (its parameters are read only there),
// _txlock=immediate, and PRAGMAs as _pragma=name(value), busy_timeout first.
func openSQLite(path string) gorm.Dialector {
	return sqlite.Open("file:" + path + "?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)")
}
