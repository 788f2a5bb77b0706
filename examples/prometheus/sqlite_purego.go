//go:build !cgo

package main

import (
	sqlite "github.com/ncruces/go-sqlite3/gormlite"
	"gorm.io/gorm"
)

// openSQLite opens the SQLite file at path with
// github.com/ncruces/go-sqlite3/gormlite (pure Go), the driver of a build
// without cgo (CGO_ENABLED=0): the same settings in its form, in a file: URI.
func openSQLite(path string) gorm.Dialector {
	return sqlite.Open("file:" + path + "?_txlock=immediate&_pragma=busy_timeout(5000)")
}
