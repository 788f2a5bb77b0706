// Package testenv opens isolated databases and Redis connections for the
// tests of every package: SQLite always, PostgreSQL, MariaDB/MySQL and Redis
// when their variables are set.
//
//	OUTBOX_POSTGRES_DSN      postgres://root@127.0.0.1:5432/test?sslmode=disable
//	OUTBOX_MYSQL_DSN         root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC
//	OUTBOX_REDIS_ADDR        127.0.0.1:6379
//	OUTBOX_REQUIRE_SERVICES  1: a missing variable or server fails the test
//	                         instead of skipping it (CI sets it)
//	OUTBOX_TEST_SQL_LOG      1: log every SQL statement
//
// Each database test gets its own PostgreSQL schema or MySQL database, or
// SQLite file, dropped when the test ends.
//
// SQLite runs on gorm.io/driver/sqlite (mattn/go-sqlite3) in a build with
// cgo and on a pure-Go driver in one without (CGO_ENABLED=0); the choice is
// in sqlite_cgo.go and sqlite_purego.go. DSNs take mattn's parameters in
// both builds.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	mysqldriver "gorm.io/driver/mysql"
	pgdriver "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// Dialect names, as used in subtest names.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
	MySQL    = "mysql"
)

// Dialects lists every dialect, SQLite first.
var Dialects = []string{SQLite, Postgres, MySQL}

// Env variable names.
const (
	PostgresEnv = "OUTBOX_POSTGRES_DSN"
	MySQLEnv    = "OUTBOX_MYSQL_DSN"
	RedisEnv    = "OUTBOX_REDIS_ADDR"
	RequireEnv  = "OUTBOX_REQUIRE_SERVICES"
)

// Required reports whether missing services must fail tests.
func Required() bool { return os.Getenv(RequireEnv) == "1" }

// Unavailable skips t, or fails it when services are required, because the
// variable env is not set.
func Unavailable(t testing.TB, env, example string) {
	t.Helper()
	msg := fmt.Sprintf("%s is not set; set it (e.g. %s=%q) to run this test", env, env, example)
	if Required() {
		t.Fatalf("%s (%s=1 requires every service)", msg, RequireEnv)
	}
	t.Skip(msg)
}

// Each runs fn as a subtest per dialect, each with a fresh database.
func Each(t *testing.T, fn func(t *testing.T, db *gorm.DB)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(d, func(t *testing.T) { fn(t, Open(t, d)) })
	}
}

// Config returns the gorm.Config tests use.
func Config() *gorm.Config {
	lvl := logger.Silent
	if os.Getenv("OUTBOX_TEST_SQL_LOG") == "1" {
		lvl = logger.Info
	}
	return &gorm.Config{Logger: logger.Default.LogMode(lvl)}
}

// Open returns a *gorm.DB on a fresh, empty database of the dialect,
// dropped when t ends. It skips (or fails) when the dialect's server is not
// configured.
func Open(t testing.TB, dialect string) *gorm.DB {
	t.Helper()
	return OpenConfig(t, dialect, Config())
}

// OpenConfig is Open with a gorm.Config of the caller's.
func OpenConfig(t testing.TB, dialect string, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	dsn := DSN(t, dialect)
	var d gorm.Dialector
	switch dialect {
	case SQLite:
		d = SQLiteDialector(dsn)
	case Postgres:
		d = pgdriver.Open(dsn)
	case MySQL:
		d = mysqldriver.Open(dsn)
	}
	db, err := gorm.Open(d, cfg)
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
		// database/sql keeps 2 idle connections by default: several relays
		// and consumers on one pool would open a connection per statement.
		sqlDB.SetMaxIdleConns(16)
	}
	return db
}

// DSN creates a fresh database of the dialect and returns its DSN; the
// database is dropped when t ends.
func DSN(t testing.TB, dialect string) string {
	t.Helper()
	name := "ot_" + randomHex(6)
	switch dialect {
	case SQLite:
		// The temporary directory is named for the test, which may hold
		// '#' (a second subtest of one name: sqlite#01) or '?': escaped,
		// or they would end the file: URI's path.
		dir := strings.NewReplacer("%", "%25", "#", "%23", "?", "%3F").Replace(t.TempDir())
		return "file:" + dir + "/" + name + ".db?_txlock=immediate&_busy_timeout=10000&_journal_mode=WAL&_foreign_keys=1"
	case Postgres:
		base := os.Getenv(PostgresEnv)
		if base == "" {
			Unavailable(t, PostgresEnv, "postgres://root@127.0.0.1:5432/test?sslmode=disable")
		}
		admin := openAdmin(t, pgdriver.Open(base))
		exec(t, admin, "CREATE SCHEMA "+name)
		t.Cleanup(func() { exec(t, admin, "DROP SCHEMA "+name+" CASCADE") })
		return withSearchPath(t, base, name)
	case MySQL:
		base := os.Getenv(MySQLEnv)
		if base == "" {
			Unavailable(t, MySQLEnv, "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC")
		}
		admin := openAdmin(t, mysqldriver.Open(base))
		exec(t, admin, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
		t.Cleanup(func() { exec(t, admin, "DROP DATABASE "+name) })
		cfg, err := mysql.ParseDSN(base)
		if err != nil {
			t.Fatalf("%s: %v", MySQLEnv, err)
		}
		cfg.DBName = name
		cfg.ParseTime = true
		return cfg.FormatDSN()
	}
	t.Fatalf("unknown dialect %q", dialect)
	return ""
}

func openAdmin(t testing.TB, d gorm.Dialector) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err == nil {
		var sqlDB interface{ Close() error }
		if sqlDB, err = db.DB(); err == nil {
			t.Cleanup(func() { _ = sqlDB.Close() })
			err = db.Exec("SELECT 1").Error
		}
	}
	if err != nil {
		t.Fatalf("connecting to %s: %v (is the server running?)", d.Name(), err)
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
		if err != nil {
			t.Fatalf("%s: %v", PostgresEnv, err)
		}
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return dsn + " search_path=" + schema
}

// RedisAddr returns OUTBOX_REDIS_ADDR, skipping (or failing) without it.
func RedisAddr(t testing.TB) string {
	t.Helper()
	addr := os.Getenv(RedisEnv)
	if addr == "" {
		Unavailable(t, RedisEnv, "127.0.0.1:6379")
	}
	return addr
}

// Name returns a unique name with the prefix, for queues, streams and keys.
func Name(prefix string) string {
	return prefix + "-" + time.Now().UTC().Format("150405") + "-" + randomHex(4)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
