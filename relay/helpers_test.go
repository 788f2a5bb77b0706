package relay_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// eachDB runs fn per dialect on a fresh database with the plugin installed
// and the outbox migrated.
func eachDB(t *testing.T, fn func(t *testing.T, db *gorm.DB)) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
			t.Fatal(err)
		}
		fn(t, db)
	})
}

// testLogger logs to the test output with OUTBOX_TEST_LOG=1, else nowhere.
func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("OUTBOX_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// newRelay builds a relay with test defaults and opts.
func newRelay(t testing.TB, db *gorm.DB, pub relay.Publisher, opts ...relay.Option) *relay.Relay {
	t.Helper()
	base := []relay.Option{relay.WithLogger(testLogger(t)), relay.WithBackoff(func(int) time.Duration { return 0 })}
	r, err := relay.New(db, pub, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// emitN writes n events in transactions of up to 500, built by mk.
func emitN(t testing.TB, db *gorm.DB, n int, mk func(i int) outbox.Event) {
	t.Helper()
	for start := 0; start < n; start += 500 {
		err := db.Transaction(func(tx *gorm.DB) error {
			evs := make([]outbox.Event, 0, 500)
			for i := start; i < min(n, start+500); i++ {
				evs = append(evs, mk(i))
			}
			return outbox.Emit(tx, evs...)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func event(i int) outbox.Event {
	return outbox.Event{ID: fmt.Sprintf("ev-%06d", i), Type: "test.event", Payload: map[string]int{"i": i}}
}

// recorder is a Publisher that records deliveries.
type recorder struct {
	mu         sync.Mutex
	deliveries []*outbox.Envelope
	count      map[string]int
	fail       func(e *outbox.Envelope) error
}

func newRecorder() *recorder { return &recorder{count: map[string]int{}} }

func (p *recorder) Publish(_ context.Context, e *outbox.Envelope) error {
	if p.fail != nil {
		if err := p.fail(e); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.deliveries = append(p.deliveries, e)
	p.count[e.ID]++
	return nil
}

func (p *recorder) delivered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.deliveries)
}

func statusOf(t testing.TB, db *gorm.DB, eventID string) outbox.OutboxEvent {
	t.Helper()
	var row outbox.OutboxEvent
	if err := db.Where("event_id = ?", eventID).First(&row).Error; err != nil {
		t.Fatalf("event %s: %v", eventID, err)
	}
	return row
}

func countStatus(t testing.TB, db *gorm.DB, s outbox.Status) int64 {
	t.Helper()
	var n int64
	if err := db.Model(&outbox.OutboxEvent{}).Where("status = ?", string(s)).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
