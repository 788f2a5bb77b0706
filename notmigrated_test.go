package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// The first write on a database that was never migrated fails with an
// error wrapping ErrNotMigrated that names the fix, for an event with a
// partition key and one without (MySQL locks keys in a table of its own).
func TestFirstWriteOnUnmigratedDatabase(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{}))
		for _, e := range []outbox.Event{{Type: "t", Payload: 1}, {Type: "t", PartitionKey: "k", Payload: 1}} {
			err := db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, e) })
			if !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), "run outbox.Migrate (or outbox migrate)") {
				t.Errorf("emit (key %q) before Migrate: %v, want ErrNotMigrated naming the fix", e.PartitionKey, err)
			}
		}
		// A failure that is not a missing table is not reported as one.
		must(t, outbox.Migrate(db))
		err := db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{Type: strings.Repeat("t", 300), Payload: 1})
		})
		if err == nil || errors.Is(err, outbox.ErrNotMigrated) {
			t.Errorf("an invalid event: %v, want an error that is not ErrNotMigrated", err)
		}
	})
}

// statements counts the statements GORM runs (the logger sees each).
type statements struct {
	logger.Interface
	mu  sync.Mutex
	sql []string
}

func (s *statements) LogMode(logger.LogLevel) logger.Interface { return s }

func (s *statements) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	s.mu.Lock()
	s.sql = append(s.sql, sql)
	s.mu.Unlock()
}

// Naming the fix costs the write path nothing where the table exists: an
// emit runs its INSERT and nothing else, as before.
func TestNotMigratedCostsNothing(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
		log := &statements{Interface: logger.Discard}
		tx := db.Session(&gorm.Session{Logger: log})
		must(t, tx.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{Type: "t", Payload: 1}) }))
		if len(log.sql) != 1 || !strings.HasPrefix(log.sql[0], "INSERT INTO outbox_events") {
			t.Errorf("an emit ran %d statements, want its INSERT only: %q", len(log.sql), log.sql)
		}
	})
}
