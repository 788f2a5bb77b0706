package relay_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

var nopPublisher = relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil })

// New refuses a database whose outbox tables were not created, saying how
// to create them, instead of failing every claim later.
func TestNewRefusesMissingTables(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{}))
		_, err := relay.New(db, nopPublisher)
		if !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), "outbox.Migrate") {
			t.Fatalf("New on an empty database: %v, want ErrNotMigrated naming outbox.Migrate", err)
		}

		// The heartbeats table is one of the outbox's tables.
		must(t, outbox.Migrate(db))
		must(t, db.Exec("DROP TABLE "+outbox.DefaultTableName+"_relays").Error)
		_, err = relay.New(db, nopPublisher)
		if !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), outbox.DefaultTableName+"_relays") {
			t.Fatalf("New without the relays table: %v, want ErrNotMigrated naming it", err)
		}
	})
}

// A table name of the plugin's is looked up as the relay's SQL names it
// (unquoted): mixed case is found on PostgreSQL, which folds it.
func TestNewFindsMixedCaseTable(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{TableName: "Outbox_Mixed", AutoMigrate: true}))
		if _, err := relay.New(db, nopPublisher); err != nil {
			t.Fatalf("New with a migrated mixed-case table: %v", err)
		}
	})
}

// Without parseTime=true the MySQL driver returns times as text: New
// refuses the DSN, naming the setting.
func TestNewRefusesNoParseTime(t *testing.T) {
	db := testenv.OpenMySQL(t, func(c *mysql.Config) { c.ParseTime = false })
	must(t, outbox.Migrate(db))
	_, err := relay.New(db, nopPublisher)
	if !errors.Is(err, relay.ErrInvalidOption) || !strings.Contains(err.Error(), "parseTime=true") {
		t.Fatalf("New with parseTime=false: %v, want ErrInvalidOption naming parseTime=true", err)
	}
}
