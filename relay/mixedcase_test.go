package relay_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// A mixed-case table name works throughout: the relay delivers, and on
// PostgreSQL (where the migration's unquoted name folds to lower case) it
// refreshes the table's statistics and is woken by the trigger's NOTIFY.
func TestMixedCaseTableName(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{TableName: "OrderEvents", AutoMigrate: true}))
		emitN(t, db, 2, event)
		var logs bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(lockedBuffer{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		pub := newRecorder()
		r := newRelay(t, db, pub, relay.WithBatchSize(1), relay.WithLogger(log))
		res, err := r.RunOnce(t.Context()) // a full batch: the relay refreshes the statistics
		must(t, err)
		if res.Published != 1 {
			t.Fatalf("%+v", res)
		}
		mu.Lock()
		if strings.Contains(logs.String(), "statistics failed") {
			t.Errorf("refreshing the statistics failed:\n%s", logs.String())
		}
		mu.Unlock()
		if db.Dialector.Name() == "postgres" {
			var analyzed bool
			for deadline := time.Now().Add(5 * time.Second); !analyzed && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				must(t, db.Raw(`SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables
					WHERE relname = 'orderevents' AND schemaname = current_schema()`).Scan(&analyzed).Error)
			}
			if !analyzed {
				t.Error("the table was not analyzed")
			}
		}

		// Woken by NOTIFY on PostgreSQL (an hour's poll otherwise); the
		// others poll.
		poll := time.Hour
		if db.Dialector.Name() != "postgres" {
			poll = 50 * time.Millisecond
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- newRelay(t, db, pub, relay.WithPollInterval(poll)).Start(ctx) }()
		time.Sleep(300 * time.Millisecond) // the backlog is delivered and the relay waits
		emitN(t, db, 1, func(int) outbox.Event { return event(2) })
		deadline := time.Now().Add(10 * time.Second)
		for pub.delivered() < 3 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		must(t, <-done)
		if n := pub.delivered(); n != 3 {
			t.Errorf("%d delivered, want 3: the relay was not woken", n)
		}
	})
}
