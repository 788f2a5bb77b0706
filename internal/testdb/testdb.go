// Package testdb creates a fresh database for one test and opens it: a
// SQLite file in the test's temporary directory, a PostgreSQL schema or a
// MySQL/MariaDB database, dropped when the test ends. The module's own
// tests (internal/testenv) and applications' tests (outboxtest.DB) share
// it. It reads no variable: its callers say where the servers are, and
// decide whether a missing one skips a test.
//
// SQLite runs on gorm.io/driver/sqlite (mattn/go-sqlite3) in a build with
// cgo and on the pure-Go github.com/ncruces/go-sqlite3/gormlite in one
// without (CGO_ENABLED=0) or with the build tag outbox_purego; the choice
// is in sqlite_cgo.go and sqlite_purego.go. DSNs take mattn's parameters in
// both builds.
package testdb

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	mysqldriver "gorm.io/driver/mysql"
	pgdriver "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Dialect names.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
	MySQL    = "mysql"
)

// sqliteParams are the parameters of every SQLite database Create makes:
// transactions take the write lock at BEGIN (one writer, no deadlocks
// between readers that upgrade), a busy connection waits instead of
// failing, and readers do not block the writer (WAL).
const sqliteParams = "?_txlock=immediate&_busy_timeout=10000&_journal_mode=WAL&_foreign_keys=1"

// Create makes a fresh, empty database of the dialect, named prefix and 12
// random hex digits, and returns its DSN; it is dropped when t ends. For
// PostgreSQL (a schema, set as the DSN's search_path) and MySQL (a
// database), base is the DSN of a server whose user may create them;
// SQLite (a file in t.TempDir()) ignores it. A server that cannot be
// reached fails t.
func Create(t testing.TB, dialect, base, prefix string) string {
	t.Helper()
	name := prefix + RandomHex(6)
	switch dialect {
	case SQLite:
		// The temporary directory is named for the test, which may hold
		// '#' (a second subtest of one name: sqlite#01) or '?': escaped,
		// or they would end the file: URI's path.
		dir := strings.NewReplacer("%", "%25", "#", "%23", "?", "%3F").Replace(t.TempDir())
		return "file:" + dir + "/" + name + ".db" + sqliteParams
	case Postgres:
		dsn := withSearchPath(t, base, name)
		admin := openAdmin(t, Postgres, base)
		exec(t, admin, "CREATE SCHEMA "+name)
		t.Cleanup(func() { exec(t, admin, "DROP SCHEMA "+name+" CASCADE") })
		return dsn
	case MySQL:
		cfg, err := mysql.ParseDSN(base)
		if err != nil {
			t.Fatalf("parsing the MySQL DSN: %v", err)
		}
		admin := openAdmin(t, MySQL, base)
		exec(t, admin, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
		t.Cleanup(func() { exec(t, admin, "DROP DATABASE "+name) })
		cfg.DBName = name
		cfg.ParseTime = true // the outbox scans DATETIME columns into time.Time
		return cfg.FormatDSN()
	}
	t.Fatalf("unknown dialect %q (want %s, %s or %s)", dialect, SQLite, Postgres, MySQL)
	return ""
}

// Dialector returns the GORM dialector that opens dsn, a DSN of the
// dialect (SQLite on this build's driver).
func Dialector(dialect, dsn string) gorm.Dialector {
	switch dialect {
	case Postgres:
		return pgdriver.Open(dsn)
	case MySQL:
		return mysqldriver.Open(dsn)
	}
	return SQLiteDialector(dsn)
}

// Open opens dsn, a DSN of the dialect, with cfg, and closes it when t
// ends (before the database Create made is dropped). Its pool is sized for
// tests: at most 4 SQLite connections (one writes at a time), and on the
// servers 16 idle ones kept (database/sql keeps 2 by default: several
// relays and consumers on one pool would open a connection per
// statement).
func Open(t testing.TB, dialect, dsn string, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(Dialector(dialect, dsn), cfg)
	if err != nil {
		t.Fatalf("opening %s: %v", dialect, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	if dialect == SQLite {
		sqlDB.SetMaxOpenConns(4)
	} else {
		sqlDB.SetMaxIdleConns(16)
	}
	return db
}

// openAdmin opens base for creating and dropping databases, closed when t
// ends, and checks that the server answers.
func openAdmin(t testing.TB, dialect, base string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(Dialector(dialect, base), &gorm.Config{Logger: logger.Discard})
	if err == nil {
		var sqlDB interface{ Close() error }
		if sqlDB, err = db.DB(); err == nil {
			t.Cleanup(func() { _ = sqlDB.Close() })
			err = db.Exec("SELECT 1").Error
		}
	}
	if err != nil {
		t.Fatalf("connecting to %s: %v (is the server running?)", dialect, err)
	}
	return db
}

func exec(t testing.TB, db *gorm.DB, sql string) {
	t.Helper()
	if err := db.Exec(sql).Error; err != nil {
		t.Errorf("%s: %v", sql, err)
	}
}

// withSearchPath sets the search_path of a PostgreSQL URL or key=value DSN.
func withSearchPath(t testing.TB, dsn, schema string) string {
	t.Helper()
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		if err != nil {
			t.Fatalf("parsing the PostgreSQL DSN: %v", err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}

// RandomHex returns 2n random hex digits, for names no other test uses.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
