package relay_test

import (
	"context"
	"fmt"
	"log/slog"
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
func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

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

// runRelays runs n relays with Start until done reports true (checked every
// 20ms) or the timeout passes, then stops them and checks that each Start
// returned nil.
func runRelays(t testing.TB, db *gorm.DB, n int, pub relay.Publisher, timeout time.Duration, done func() bool, opts ...relay.Option) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, n)
	for i := range n {
		r := newRelay(t, db, pub, append([]relay.Option{relay.WithWorkerID(fmt.Sprintf("relay-%d", i))}, opts...)...)
		go func() { errs <- r.Start(ctx) }()
	}
	deadline := time.Now().Add(timeout)
	for !done() {
		if time.Now().After(deadline) {
			cancel()
			for range n {
				<-errs
			}
			t.Fatalf("relays did not finish within %v", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Start returned %v", err)
		}
	}
}

// holdTracker wraps a Publisher and fails the test if one event, or one
// partition key, is held by two deliveries at once; made by trackOrdered,
// also if an event of a key is published after a later one of its key
// (event ids in the order of their key, such as event's).
type holdTracker struct {
	t    testing.TB
	next relay.Publisher

	mu        sync.Mutex
	events    map[string]string // event id -> holder
	keys      map[string]string // partition key -> event id
	starts    int
	published map[string]string // partition key -> last event id published; nil: no order check
}

func track(t testing.TB, next relay.Publisher) *holdTracker {
	return &holdTracker{t: t, next: next, events: map[string]string{}, keys: map[string]string{}}
}

func trackOrdered(t testing.TB, next relay.Publisher) *holdTracker {
	h := track(t, next)
	h.published = map[string]string{}
	return h
}

func (h *holdTracker) Publish(ctx context.Context, e *outbox.Envelope) error {
	h.mu.Lock()
	h.starts++
	if other, ok := h.events[e.ID]; ok {
		h.t.Errorf("event %s delivered twice at once (attempt %d, and %s)", e.ID, e.Attempt, other)
	}
	h.events[e.ID] = fmt.Sprint("attempt ", e.Attempt)
	if e.PartitionKey != "" {
		if other, ok := h.keys[e.PartitionKey]; ok {
			h.t.Errorf("key %s: event %s delivered while %s was in flight", e.PartitionKey, e.ID, other)
		}
		h.keys[e.PartitionKey] = e.ID
	}
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.events, e.ID)
		if e.PartitionKey != "" {
			delete(h.keys, e.PartitionKey)
		}
		h.mu.Unlock()
	}()
	time.Sleep(time.Duration(len(e.ID)%3) * 50 * time.Microsecond) // widen the window a little
	err := h.next.Publish(ctx, e)
	if err == nil && e.PartitionKey != "" {
		h.mu.Lock()
		if last, ok := h.published[e.PartitionKey]; ok && e.ID <= last {
			h.t.Errorf("key %s: event %s published after %s", e.PartitionKey, e.ID, last)
		}
		if h.published != nil {
			h.published[e.PartitionKey] = e.ID
		}
		h.mu.Unlock()
	}
	return err
}

// past is a time long gone, as the dialect stores it.
func past(db *gorm.DB) any {
	if db.Dialector.Name() == "sqlite" {
		return "2000-01-01 00:00:00.000000000+00:00"
	}
	return "2000-01-01 00:00:00"
}

// emitN writes n events built by mk.
func emitN(t testing.TB, db *gorm.DB, n int, mk func(i int) outbox.Event) {
	t.Helper()
	testenv.Emit(t, db, n, mk)
}
