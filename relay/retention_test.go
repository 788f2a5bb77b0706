package relay_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// A backlog of expired published rows is deleted while the relay runs, not
// at a fixed number of rows per minute.
func TestRetentionKeepsUpWithABacklog(t *testing.T) {
	const n = 25000
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, n, event)
		must(t, db.Exec("UPDATE outbox_events SET status = 'published', published_at = ?", past(db)).Error)
		runRelays(t, db, 1, newRecorder(), 60*time.Second, func() bool {
			var left int64
			db.Model(&outbox.OutboxEvent{}).Count(&left)
			return left == 0
		}, relay.WithRetention(time.Hour))
	})
}

// A cleanup that waits (here on a row lock held by another transaction;
// in production on a large history) does not hold deliveries back: where
// the database takes concurrent writers the janitor runs beside the
// fetcher, not between its batches.
func TestSlowCleanupDoesNotHoldDeliveriesBack(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		if db.Dialector.Name() == "sqlite" {
			t.Skip("SQLite has one writer: its janitor runs between batches")
		}
		emitN(t, db, 1, event)
		must(t, db.Exec("UPDATE outbox_events SET status = 'published', published_at = ?", past(db)).Error)
		// Hold the expired row (by primary key: no gap lock on MySQL, so
		// inserts go on): the cleanup's DELETE waits for it.
		var id int64
		must(t, db.Raw("SELECT id FROM outbox_events").Scan(&id).Error)
		lock := db.Begin()
		must(t, lock.Error)
		defer lock.Rollback()
		must(t, lock.Exec("SELECT id FROM outbox_events WHERE id = ? FOR UPDATE", id).Error)

		rec := newRecorder()
		r := newRelay(t, db, rec, relay.WithRetention(time.Hour), relay.WithPollInterval(20*time.Millisecond))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- r.Start(ctx) }()
		time.Sleep(1500 * time.Millisecond) // the first cleanup starts a second after Start, and waits
		emitN(t, db, 1, func(int) outbox.Event { return event(1) })
		deadline := time.Now().Add(5 * time.Second)
		for rec.delivered() == 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		got := rec.delivered()
		must(t, lock.Rollback().Error) // the cleanup goes on, and Start can return
		cancel()
		must(t, <-errc)
		if got != 1 {
			t.Fatalf("%d deliveries while a cleanup waited, want 1: the cleanup held the fetcher", got)
		}
	})
}
