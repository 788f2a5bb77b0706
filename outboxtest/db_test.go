package outboxtest_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/outboxtestenv"
	"github.com/gormoutbox/outbox/internal/testdb"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/outboxtest"
)

// DB gives each test a database of its own on every dialect, with the
// plugin installed and the outbox migrated: an application's write emits,
// the assertions see it, Drain delivers it through an idempotent Mux; and
// a second database of the same test sees none of it.
func TestDB(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			db := outboxtestenv.DB(t, d, outboxtest.AutoMigrate(&Order{}))
			if got := db.Dialector.Name(); got != d {
				t.Fatalf("dialect %q, want %q", got, d)
			}
			createOrder(t, db, "ada", 120)
			outboxtest.RequireEmitted(t, db, outbox.Event{Type: "order.created", AggregateID: "1"})
			mux := newMux(t, db) // its table was migrated by DB
			handled := 0
			must(t, mux.HandleFunc("order.created", "count", func(context.Context, *outbox.Envelope) error { handled++; return nil }))
			if res := outboxtest.Drain(t, db, mux); res.Published != 1 || handled != 1 {
				t.Errorf("drained %+v, handled %d", res, handled)
			}

			other := outboxtestenv.DB(t, d, outboxtest.AutoMigrate(&Order{}))
			outboxtest.RequireNotEmitted(t, other, outbox.Event{})
			if name(t, other) == name(t, db) {
				t.Errorf("two calls share the database %s", name(t, db))
			}
		})
	}
}

// The database DB made is gone after the test: the schema, database or
// file no longer exists (it did during the test: the control).
func TestDBDropsItsDatabase(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			var got string
			t.Run("test", func(t *testing.T) {
				got = name(t, outboxtestenv.DB(t, d))
				if !exists(t, d, got) {
					t.Fatalf("%s does not exist during the test", got)
				}
			})
			if exists(t, d, got) {
				t.Errorf("%s still exists after the test", got)
			}
		})
	}
}

// Without an option, DB opens what DatabaseEnv names, on each dialect.
func TestDBFromVariable(t *testing.T) {
	for _, c := range []struct{ dialect, value string }{
		{testenv.SQLite, ""},
		{testenv.SQLite, "sqlite"},
		{testenv.Postgres, ""}, // the URL of OUTBOX_POSTGRES_DSN
		{testenv.MySQL, "mysql://"},
	} {
		t.Run(c.dialect+"_"+c.value, func(t *testing.T) {
			v := c.value
			if c.dialect != testenv.SQLite {
				v += testenv.BaseDSN(t, c.dialect)
			}
			t.Setenv(outboxtest.DatabaseEnv, v)
			db := outboxtest.DB(t)
			if got := db.Dialector.Name(); got != c.dialect {
				t.Fatalf("%s=%q opened %q", outboxtest.DatabaseEnv, c.value, got)
			}
			emit(t, db, outbox.Event{Type: "x"})
			outboxtest.RequireEmitted(t, db, outbox.Event{Type: "x"})
		})
	}
}

// An empty DSN skips the test; an option it cannot use fails it, naming
// the option; a DatabaseEnv it cannot read fails it without quoting the
// value (it may hold a password).
func TestDBRefuses(t *testing.T) {
	var sub *testing.T
	t.Run("empty", func(t *testing.T) {
		sub = t
		outboxtest.DB(t, outboxtest.Postgres(""))
		t.Error("DB returned")
	})
	if !sub.Skipped() {
		t.Errorf("Postgres(\"\") did not skip the test")
	}
	for _, c := range []struct {
		name, env string
		opts      []outboxtest.DBOption
		want      string
	}{
		{name: "plugin", opts: []outboxtest.DBOption{outboxtest.Plugin(nil)}, want: "outboxtest.DB: Plugin(nil): want a *outbox.Plugin"},
		{name: "gorm", opts: []outboxtest.DBOption{outboxtest.GormConfig(nil)}, want: "outboxtest.DB: GormConfig(nil)"},
		{name: "env", env: "sqlserver://sa:secret@db", want: outboxtest.DatabaseEnv + " is set to none of: sqlite, postgres://"},
		{name: "url", opts: []outboxtest.DBOption{outboxtest.Postgres("postgres://u:secret@host:port/db")}, want: `parsing the PostgreSQL DSN: invalid port ":port"`},
		{name: "mysql", opts: []outboxtest.DBOption{outboxtest.MySQL("u:secret@tcp(h:3306)/db?parseTime=maybe")}, want: "parsing the MySQL DSN: invalid bool value: maybe"},
		{name: "table", opts: []outboxtest.DBOption{outboxtest.Plugin(&outbox.Plugin{TableName: "no such; table"})}, want: "outboxtest.DB: installing the outbox plugin:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.env != "" {
				t.Setenv(outboxtest.DatabaseEnv, c.env)
			}
			msg := fatalOf(t, func(t testing.TB) { outboxtest.DB(t, c.opts...) })
			if !strings.Contains(msg, c.want) || strings.Contains(msg, "secret") {
				t.Errorf("the failure is %q, want %q (and no password)", msg, c.want)
			}
		})
	}
}

// Plugin, AutoMigrate and GormConfig reach the database: the outbox under
// the plugin's table name, the application's table under the naming
// strategy of the gorm.Config.
func TestDBOptions(t *testing.T) {
	eachOption := func(t *testing.T, d string, opts ...outboxtest.DBOption) *gorm.DB {
		return outboxtestenv.DB(t, d, append([]outboxtest.DBOption{outboxtest.AutoMigrate(&Order{})}, opts...)...)
	}
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			t.Parallel()
			db := eachOption(t, d, outboxtest.Plugin(&outbox.Plugin{TableName: "ledger_events"}),
				outboxtest.GormConfig(func(c *gorm.Config) { c.NamingStrategy = schema.NamingStrategy{TablePrefix: "app_"} }))
			createOrder(t, db, "bob", 5)
			outboxtest.RequireEmitted(t, db, outbox.Event{Type: "order.created"})
			for table, want := range map[string]bool{"ledger_events": true, "app_orders": true, "outbox_events": false, "orders": false} {
				if got := db.Migrator().HasTable(table); got != want {
					t.Errorf("table %s exists: %v, want %v", table, got, want)
				}
			}
			// The control: without the options, the default names.
			plain := eachOption(t, d)
			for _, table := range []string{"outbox_events", "orders"} {
				if !plain.Migrator().HasTable(table) {
					t.Errorf("without options, no table %s", table)
				}
			}
		})
	}
}

// name is the database's own name: the schema, the database or the file.
func name(t testing.TB, db *gorm.DB) string {
	t.Helper()
	var q string
	switch db.Dialector.Name() {
	case testenv.Postgres:
		q = "SELECT current_schema()"
	case testenv.MySQL:
		q = "SELECT DATABASE()"
	default:
		q = "SELECT file FROM pragma_database_list WHERE name = 'main'"
	}
	var s string
	must(t, db.Raw(q).Scan(&s).Error)
	return s
}

// exists reports whether the schema, database or file of the dialect
// called name exists, asked of a connection of its own.
func exists(t testing.TB, dialect, name string) bool {
	t.Helper()
	if dialect == testenv.SQLite {
		_, err := os.Stat(name)
		return err == nil
	}
	admin := testdb.Open(t, dialect, testenv.BaseDSN(t, dialect), testenv.Config())
	var n int64
	must(t, admin.Raw("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", name).Scan(&n).Error)
	return n == 1
}

// fatalT is t whose Fatalf and Fatal record the failure and stop the
// function under test (by a panic that fatalOf recovers), so that a test
// can check a helper's failure message without failing itself.
type fatalT struct {
	testing.TB
	msg string
}

type fatalStop struct{}

func (f *fatalT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(fatalStop{})
}

func (f *fatalT) Fatal(args ...any) {
	f.msg = fmt.Sprint(args...)
	panic(fatalStop{})
}

// fatalOf runs fn with a fatalT and returns its failure; a fn that does
// not fail fails t.
func fatalOf(t *testing.T, fn func(t testing.TB)) (msg string) {
	t.Helper()
	f := &fatalT{TB: t}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fatalStop); !ok {
				panic(r)
			}
			msg = f.msg
		}
	}()
	fn(f)
	t.Fatalf("it did not fail")
	return ""
}
