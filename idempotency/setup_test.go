package idempotency_test

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

// NewStore refuses a database whose table was not created, saying how to
// create it, instead of failing every later call with "no such table".
func TestNewStoreRefusesMissingTable(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		_, err := idempotency.NewStore(db)
		if !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), "outbox.Migrate") {
			t.Fatalf("NewStore on an empty database: %v, want ErrNotMigrated naming outbox.Migrate", err)
		}

		// outbox.Migrate creates the default table.
		must(t, outbox.Migrate(db))
		s, err := idempotency.NewStore(db)
		must(t, err)
		must(t, s.Do(t.Context(), "k", func(context.Context) error { return nil }))

		// A custom table: refused until idempotency.Migrate created it.
		_, err = idempotency.NewStore(db, idempotency.WithTable("custom_idem"))
		if !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), "custom_idem") {
			t.Fatalf("NewStore with a missing custom table: %v, want ErrNotMigrated naming it", err)
		}
		must(t, idempotency.Migrate(t.Context(), db, idempotency.WithTable("custom_idem")))
		s, err = idempotency.NewStore(db, idempotency.WithTable("custom_idem"))
		must(t, err)
		must(t, s.Do(t.Context(), "k", func(context.Context) error { return nil }))
	})
}

// Without parseTime=true the MySQL driver returns times as text, which GORM
// cannot read into time.Time: NewStore refuses the DSN, naming the setting.
func TestNoParseTimeRefused(t *testing.T) {
	db := testenv.OpenMySQL(t, func(c *mysql.Config) { c.ParseTime = false })
	must(t, idempotency.Migrate(t.Context(), db))
	_, err := idempotency.NewStore(db)
	if !errors.Is(err, idempotency.ErrInvalidOption) || !strings.Contains(err.Error(), "parseTime=true") {
		t.Fatalf("NewStore with parseTime=false: %v, want ErrInvalidOption naming parseTime=true", err)
	}
}
