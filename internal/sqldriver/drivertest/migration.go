package drivertest

import (
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseRetention(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	// DeletePublished deletes only published events published longer ago
	// than OlderThan, at most Limit, oldest published first.
	t.Run("DeletePublished", func(t *testing.T) {
		db := setup(t)
		insert(t, drv, db, false, event("old1", "", nil), event("old2", "", nil), event("old3", "", nil),
			event("recent", "", nil), event("dead", "", nil), event("pending", "", nil), event("failed", "", nil))
		old, oa := drv.NowPlus(-2 * time.Hour)
		recent, ra := drv.NowPlus(-time.Minute)
		// old3 was published first, then old2, then old1.
		for i, id := range []string{"old3", "old2", "old1"} {
			at, aa := drv.NowPlus(-3*time.Hour + time.Duration(i)*time.Minute)
			must(t, db.Exec("UPDATE "+Table+" SET status = 'published', published_at = "+at+" WHERE event_id = ?", append(aa, id)...).Error)
		}
		must(t, db.Exec("UPDATE "+Table+" SET status = 'published', published_at = "+recent+" WHERE event_id = 'recent'", ra...).Error)
		// A dead or failed event is never deleted, even with an old published_at.
		must(t, db.Exec("UPDATE "+Table+" SET status = 'dead', published_at = "+old+" WHERE event_id = 'dead'", oa...).Error)
		must(t, db.Exec("UPDATE "+Table+" SET status = 'failed', published_at = "+old+" WHERE event_id = 'failed'", oa...).Error)
		del := func(limit int) (int, int64) {
			found, deleted, err := drv.DeletePublished(t.Context(), db, sqldriver.DeletePublishedParams{Table: Table, OlderThan: time.Hour, Limit: limit})
			must(t, err)
			return found, deleted
		}
		if f, d := del(2); f != 2 || d != 2 {
			t.Fatalf("DeletePublished(limit 2) = %d found, %d deleted; want 2, 2", f, d)
		}
		if got := count(t, db, Table, "event_id = 'old1'"); got != 1 {
			t.Fatal("old1 deleted before old3 and old2 (oldest published first)")
		}
		if f, d := del(10); f != 1 || d != 1 {
			t.Fatalf("DeletePublished(limit 10) = %d found, %d deleted; want 1, 1", f, d)
		}
		var left []string
		must(t, db.Raw("SELECT event_id FROM "+Table+" ORDER BY event_id").Scan(&left).Error)
		if strings.Join(left, ",") != "dead,failed,pending,recent" {
			t.Fatalf("left %v, want dead, failed, pending, recent", left)
		}
	})
}

func exerciseMigration(t *testing.T, drv sqldriver.Driver, open func(*testing.T) *gorm.DB) {
	// LockMigrations runs one fn at a time across connections.
	t.Run("LockMigrationsSerialises", func(t *testing.T) {
		db := open(t)
		var (
			inside, most atomic.Int32
			wg           sync.WaitGroup
		)
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				errs <- drv.LockMigrations(db, func(tx *gorm.DB) error {
					n := inside.Add(1)
					defer inside.Add(-1)
					if n > most.Load() {
						most.Store(n)
					}
					time.Sleep(50 * time.Millisecond)
					return tx.Exec("SELECT 1").Error
				})
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(t, err)
		}
		if most.Load() != 1 {
			t.Fatalf("%d migrators ran at once, want 1", most.Load())
		}
	})

	// The version table is created once (IF NOT EXISTS), keyed by target
	// and name, and stamps applied_at itself.
	t.Run("VersionTable", func(t *testing.T) {
		db := open(t)
		q := drv.VersionTableSQL("versions")
		must(t, db.Exec(q).Error)
		must(t, db.Exec(q).Error)
		must(t, db.Exec("INSERT INTO versions (target, name) VALUES (?, ?)", "t", "0001").Error)
		must(t, db.Exec("INSERT INTO versions (target, name) VALUES (?, ?)", "u", "0001").Error)
		if err := db.Exec("INSERT INTO versions (target, name) VALUES (?, ?)", "t", "0001").Error; err == nil {
			t.Fatal("a second record of one target and name was accepted")
		}
		if got := count(t, db, "versions", "applied_at IS NOT NULL"); got != 2 {
			t.Fatalf("%d records stamped, want 2", got)
		}
	})
}
