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
// refreshes the table's statistics and is woken by the writer's NOTIFY.
func TestMixedCaseTableName(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{TableName: "OrderEvents", AutoMigrate: true}))
		// More events than the relay's threshold for refreshing the
		// statistics (1000 changed rows).
		emitN(t, db, 1200, event)
		var logs bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(lockedBuffer{&mu, &logs}, &slog.HandlerOptions{Level: slog.LevelDebug}))
		pub := newRecorder()
		analyzed := db.Dialector.Name() != "postgres"
		// A full batch makes the relay refresh the statistics, once they
		// count the inserts (the server's statistics lag up to a second).
		for deadline := time.Now().Add(15 * time.Second); !analyzed && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			r := newRelay(t, db, pub, relay.WithBatchSize(1), relay.WithLogger(log))
			res, err := r.RunOnce(t.Context())
			must(t, err)
			if res.Published != 1 {
				t.Fatalf("%+v", res)
			}
			time.Sleep(100 * time.Millisecond) // the ANALYZE runs in the background
			must(t, db.Raw(`SELECT last_analyze IS NOT NULL FROM pg_stat_user_tables
				WHERE relname = 'orderevents' AND schemaname = current_schema()`).Scan(&analyzed).Error)
		}
		if !analyzed {
			t.Error("the table was not analyzed")
		}
		mu.Lock()
		if strings.Contains(logs.String(), "statistics failed") {
			t.Errorf("refreshing the statistics failed:\n%s", logs.String())
		}
		mu.Unlock()
		// Two events for the relay below, the second one pending.
		must(t, db.Exec("DELETE FROM OrderEvents").Error)
		emitN(t, db, 2, event)
		pub = newRecorder()
		res, err := newRelay(t, db, pub, relay.WithBatchSize(1)).RunOnce(t.Context())
		if err != nil || res.Published != 1 {
			t.Fatalf("RunOnce: %+v, %v", res, err)
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
