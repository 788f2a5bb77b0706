//go:build !cgo

package workload

import (
	sqlite "github.com/ncruces/go-sqlite3/gormlite"
	_ "github.com/ncruces/go-sqlite3/vfs/memdb" // shared in-memory databases (sqlitedsn.PureGo)
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqlitedsn"
)

// sqliteDialector opens dsn (mattn/go-sqlite3's parameters) with the pure-Go
// driver of a build without cgo, its PRAGMA parameters rewritten.
func sqliteDialector(dsn string) gorm.Dialector {
	pure, err := sqlitedsn.PureGo(dsn, nil)
	if err != nil {
		pure = dsn // gorm.Open reports the malformed DSN
	}
	return sqlite.Open(pure)
}
