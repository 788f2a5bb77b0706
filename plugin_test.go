package outbox_test

import (
	"errors"
	"strings"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func openSQLite(t *testing.T) *gorm.DB { return testenv.Open(t, testenv.SQLite) }

func TestPluginRejectsUnsafeTableName(t *testing.T) {
	for _, name := range []string{
		"outbox; DROP TABLE users", "1events", "my-events", "a.b", `"quoted"`, "events ", "é",
		strings.Repeat("x", 49),
	} {
		db := openSQLite(t)
		err := db.Use(&outbox.Plugin{TableName: name})
		if !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("TableName %q: err = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestPluginCustomTable(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{TableName: "app_outbox", AutoMigrate: true}))
		must(t, db.AutoMigrate(&Order{}))
		must(t, db.Create(&Order{Customer: "c"}).Error)
		var n int64
		must(t, db.Table("app_outbox").Count(&n).Error)
		if n != 1 {
			t.Errorf("%d rows in app_outbox, want 1", n)
		}
		if db.Migrator().HasTable(outbox.DefaultTableName) {
			t.Errorf("the default table was created too")
		}
	})
}

func TestPluginWithoutAutoMigrate(t *testing.T) {
	db := openSQLite(t)
	must(t, db.Use(&outbox.Plugin{}))
	if db.Migrator().HasTable(outbox.DefaultTableName) {
		t.Fatal("Use created the table without AutoMigrate")
	}
	must(t, outbox.Migrate(db))
	must(t, outbox.Migrate(db)) // idempotent
	if !db.Migrator().HasTable(outbox.DefaultTableName) {
		t.Fatal("Migrate did not create the table")
	}
}

func TestPluginRegisteredTwice(t *testing.T) {
	db := openSQLite(t)
	must(t, db.Use(&outbox.Plugin{}))
	if err := db.Use(&outbox.Plugin{}); err == nil {
		t.Error("a second db.Use succeeded")
	}
}

// Replicas that start together all migrate: none may fail.
func TestConcurrentMigrate(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			dsn := testenv.DSN(t, d)
			dbs := make([]*gorm.DB, 4)
			for i := range dbs { // opened one by one: SQLite switching a new file to WAL is not what is tested
				db, err := gorm.Open(dialectorFor(d, dsn), testenv.Config())
				must(t, err)
				sqlDB, _ := db.DB()
				t.Cleanup(func() { _ = sqlDB.Close() })
				dbs[i] = db
			}
			errs := make(chan error, len(dbs))
			for _, db := range dbs {
				go func() { errs <- db.Use(&outbox.Plugin{AutoMigrate: true}) }()
			}
			for range dbs {
				if err := <-errs; err != nil {
					t.Errorf("concurrent migrate: %v", err)
				}
			}
		})
	}
}

func dialectorFor(d, dsn string) gorm.Dialector {
	switch d {
	case testenv.Postgres:
		return postgres.Open(dsn)
	case testenv.MySQL:
		return mysql.Open(dsn)
	}
	return testenv.SQLiteDialector(dsn)
}
