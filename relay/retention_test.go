package relay_test

import (
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
