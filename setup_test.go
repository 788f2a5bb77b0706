package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// outbox.Migrate creates every table the library uses with its default
// name, the idempotency records included, so that nothing else is needed
// before relay.New and idempotency.NewStore.
func TestMigrateCreatesEveryTable(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{}))
		must(t, outbox.Migrate(db))
		must(t, outbox.Migrate(db)) // idempotent
		want := []string{outbox.DefaultTableName, outbox.DefaultTableName + "_relays", outbox.DefaultTableName + "_attempts", idempotency.DefaultTableName}
		if db.Dialector.Name() == "mysql" {
			want = append(want, outbox.DefaultTableName+"_keys")
		}
		for _, table := range want {
			if !db.Migrator().HasTable(table) {
				t.Errorf("outbox.Migrate did not create %s", table)
			}
		}
		s, err := idempotency.NewStore(db)
		must(t, err)
		if err := s.Do(t.Context(), "k", func(context.Context) error { return nil }); err != nil {
			t.Errorf("Do after outbox.Migrate: %v", err)
		}
	})
}

// Without parseTime=true the MySQL driver returns times as text, which GORM
// cannot read into time.Time: db.Use refuses the DSN, naming the setting.
func TestPluginRefusesNoParseTime(t *testing.T) {
	db := testenv.OpenMySQL(t, func(c *mysql.Config) { c.ParseTime = false })
	err := db.Use(&outbox.Plugin{})
	if !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "parseTime=true") {
		t.Fatalf("db.Use with parseTime=false: %v, want ErrInvalidConfig naming parseTime=true", err)
	}
}
