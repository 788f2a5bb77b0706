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
// The databases are made by internal/testdb, which outboxtest.DB shares.
// SQLite runs on gorm.io/driver/sqlite (mattn/go-sqlite3) in a build with
// cgo and on a pure-Go driver in one without (CGO_ENABLED=0); DSNs take
// mattn's parameters in both builds.
package testenv

import (
	"fmt"
	"os"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox/internal/testdb"
)

// Dialect names, as used in subtest names.
const (
	SQLite   = testdb.SQLite
	Postgres = testdb.Postgres
	MySQL    = testdb.MySQL
)

// SQLiteDriver names the SQLite driver of this build.
const SQLiteDriver = testdb.SQLiteDriver

// SQLiteDialector opens dsn, a DSN with mattn/go-sqlite3's parameters
// (_txlock=immediate, _busy_timeout=…), with this build's SQLite driver.
func SQLiteDialector(dsn string) gorm.Dialector { return testdb.SQLiteDialector(dsn) }

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
	return testdb.Open(t, dialect, DSN(t, dialect), cfg)
}

// DSN creates a fresh database of the dialect and returns its DSN; the
// database is dropped when t ends. It skips (or fails) when the dialect's
// server is not configured.
func DSN(t testing.TB, dialect string) string {
	t.Helper()
	return testdb.Create(t, dialect, BaseDSN(t, dialect), "ot_")
}

// BaseDSN returns the DSN of the dialect's server from its variable (""
// for SQLite), skipping (or failing) t when the variable is not set.
func BaseDSN(t testing.TB, dialect string) string {
	t.Helper()
	switch dialect {
	case Postgres:
		return envOr(t, PostgresEnv, "postgres://root@127.0.0.1:5432/test?sslmode=disable")
	case MySQL:
		return envOr(t, MySQLEnv, "root@tcp(127.0.0.1:3306)/test?parseTime=true&loc=UTC")
	}
	return ""
}

func envOr(t testing.TB, env, example string) string {
	t.Helper()
	v := os.Getenv(env)
	if v == "" {
		Unavailable(t, env, example)
	}
	return v
}

// RedisAddr returns OUTBOX_REDIS_ADDR, skipping (or failing) without it.
func RedisAddr(t testing.TB) string {
	t.Helper()
	return envOr(t, RedisEnv, "127.0.0.1:6379")
}

// Name returns a unique name with the prefix, for queues, streams and keys.
func Name(prefix string) string {
	return prefix + "-" + time.Now().UTC().Format("150405") + "-" + testdb.RandomHex(4)
}
