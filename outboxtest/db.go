package outboxtest

import (
	"errors"
	"os"
	"strings"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testdb"
)

// DatabaseEnv is the variable DB reads when no option names a database:
// empty or "sqlite" for SQLite, a PostgreSQL URL (postgres://… or
// postgresql://…), or mysql:// followed by a MySQL DSN in the form of
// github.com/go-sql-driver/mysql
// (mysql://root@tcp(127.0.0.1:3306)/test). It lets one test suite run on
// SQLite on a laptop and on the production database's dialect in CI.
const DatabaseEnv = "OUTBOXTEST_DATABASE"

// DBOption configures DB.
type DBOption func(*dbConfig)

type dbConfig struct {
	dialect string // "": from DatabaseEnv
	base    string
	plugin  *outbox.Plugin
	models  []any
	edit    []func(*gorm.Config)
	errs    []error
}

// SQLite makes DB open SQLite whatever DatabaseEnv says (the default when
// it is not set).
func SQLite() DBOption {
	return func(c *dbConfig) { c.dialect, c.base = testdb.SQLite, "" }
}

// Postgres makes DB create the test's database as a schema on the
// PostgreSQL server of dsn (a URL or key=value DSN whose user may create
// schemas), set as the connection's search_path. An empty dsn skips the
// test (t.Skip), so that a test of PostgreSQL runs where a server is
// configured: Postgres(os.Getenv("TEST_POSTGRES_DSN")).
func Postgres(dsn string) DBOption {
	return func(c *dbConfig) { c.dialect, c.base = testdb.Postgres, dsn }
}

// MySQL makes DB create the test's database on the MySQL or MariaDB server
// of dsn (a DSN of github.com/go-sql-driver/mysql, with or without a
// mysql:// before it, whose user may create databases); parseTime=true is
// set. An empty dsn skips the test (t.Skip), as with Postgres.
func MySQL(dsn string) DBOption {
	return func(c *dbConfig) { c.dialect, c.base = testdb.MySQL, strings.TrimPrefix(dsn, "mysql://") }
}

// Plugin installs p instead of a zero outbox.Plugin: a TableName, a
// Registry, a MaxPayloadSize of the application's. The outbox is migrated
// under p's table name. p is installed on this database only: give each
// DB a Plugin of its own.
func Plugin(p *outbox.Plugin) DBOption {
	return func(c *dbConfig) {
		if p == nil {
			c.errs = append(c.errs, errors.New("Plugin(nil): want a *outbox.Plugin"))
		}
		c.plugin = p
	}
}

// AutoMigrate makes DB create the application's tables too, with GORM's
// AutoMigrate, after the plugin is installed (so that tables of models
// with hooks exist before the test writes them).
func AutoMigrate(models ...any) DBOption {
	return func(c *dbConfig) { c.models = append(c.models, models...) }
}

// GormConfig lets edit change the gorm.Config DB opens the database with
// (a fresh one for each call, whose Logger discards everything): a
// NamingStrategy, a Logger, NowFunc or SkipDefaultTransaction as the
// application sets them.
func GormConfig(edit func(*gorm.Config)) DBOption {
	return func(c *dbConfig) {
		if edit == nil {
			c.errs = append(c.errs, errors.New("GormConfig(nil): want a function"))
		}
		c.edit = append(c.edit, edit)
	}
}

// DB returns a database of its own for the test t, with the outbox plugin
// installed and the outbox migrated (outbox.Migrate: the outbox table, its
// relays table and the idempotency records), dropped when t ends:
//
//	db := outboxtest.DB(t, outboxtest.AutoMigrate(&Order{}))
//
// By default it is a SQLite file in t.TempDir() (WAL, transactions that
// take the write lock at BEGIN, a 10 s busy timeout, at most 4
// connections); on PostgreSQL a schema of its own, on MySQL/MariaDB a
// database of its own, made on the server that Postgres, MySQL or, without
// them, DatabaseEnv names. When t ends, the pool is closed and the
// database dropped with everything in it, after the cleanups registered
// once DB has returned (such as one that stops a relay started on it).
// Each call makes a new one, so that tests may run in parallel.
//
// A configuration DB cannot use, or a server it cannot reach, fails the
// test (t.Fatalf) with the reason.
func DB(t testing.TB, opts ...DBOption) *gorm.DB {
	t.Helper()
	var c dbConfig
	for _, o := range opts {
		o(&c)
	}
	if err := errors.Join(c.errs...); err != nil {
		t.Fatalf("outboxtest.DB: %v", err)
	}
	dialect, base := c.dialect, c.base
	if dialect == "" {
		var err error
		if dialect, base, err = parseDatabase(os.Getenv(DatabaseEnv)); err != nil {
			t.Fatalf("outboxtest.DB: %v", err)
		}
	}
	if dialect != testdb.SQLite && base == "" {
		t.Skipf("outboxtest.DB: %s(\"\"): no DSN of a server given, so the test is skipped", optionName(dialect))
	}
	cfg := &gorm.Config{Logger: logger.Discard}
	for _, edit := range c.edit {
		edit(cfg)
	}
	db := testdb.Open(t, dialect, testdb.Create(t, dialect, base, "outboxtest_"), cfg)
	p := c.plugin
	if p == nil {
		p = &outbox.Plugin{}
	}
	if err := db.Use(p); err != nil {
		t.Fatalf("outboxtest.DB: installing the outbox plugin: %v", err)
	}
	if err := outbox.Migrate(db); err != nil {
		t.Fatalf("outboxtest.DB: %v", err)
	}
	if len(c.models) > 0 {
		if err := db.AutoMigrate(c.models...); err != nil {
			t.Fatalf("outboxtest.DB: migrating the application's models: %v", err)
		}
	}
	return db
}

// optionName is the option of a server dialect.
func optionName(dialect string) string {
	if dialect == testdb.MySQL {
		return "MySQL"
	}
	return "Postgres"
}

// parseDatabase reads DatabaseEnv's value v: the dialect and the DSN of
// its server. The error does not quote v, which may hold a password.
func parseDatabase(v string) (dialect, base string, err error) {
	v = strings.TrimSpace(v)
	switch {
	case v == "" || strings.EqualFold(v, "sqlite"):
		return testdb.SQLite, "", nil
	case strings.HasPrefix(v, "postgres://"), strings.HasPrefix(v, "postgresql://"):
		return testdb.Postgres, v, nil
	case strings.HasPrefix(v, "mysql://") && len(v) > len("mysql://"):
		return testdb.MySQL, strings.TrimPrefix(v, "mysql://"), nil
	}
	return "", "", errors.New(DatabaseEnv + " is set to none of: sqlite, postgres://…, postgresql://…, mysql://<go-sql-driver DSN>")
}
