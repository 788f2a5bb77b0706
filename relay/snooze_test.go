package relay_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// outbox.Snooze hands the event back without spending an attempt, to be
// delivered again after the delay; the rest of the batch is delivered.
func TestSnoozeSpendsNoAttempt(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 3, event)
		var mu sync.Mutex
		var attempts []int
		snoozes := 3
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			if e.ID != event(0).ID {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			attempts = append(attempts, e.Attempt)
			if snoozes > 0 {
				snoozes--
				return outbox.Snooze(errors.New("not yet"), 200*time.Millisecond)
			}
			return nil
		})
		// One attempt only, one delivery at a time: a snooze must spend
		// none, and must not stop the deliveries after it.
		r := newRelay(t, db, pub, relay.WithMaxAttempts(1), relay.WithConcurrency(1))
		res, err := r.RunOnce(t.Context())
		must(t, err)
		if res != (relay.Result{Claimed: 3, Published: 2, Released: 1}) {
			t.Fatalf("first run: %+v, want 2 published and the snoozed one released", res)
		}
		row := statusOf(t, db, event(0).ID)
		if row.Status != outbox.StatusPending || row.Attempts != 0 || !strings.Contains(deref(row.LastError), "not yet") {
			t.Fatalf("snoozed row: status %s, attempts %d, error %s", row.Status, row.Attempts, deref(row.LastError))
		}
		var secs float64
		must(t, db.Raw("SELECT "+secondsUntil(db, "available_at")+" FROM outbox_events WHERE event_id = ?", event(0).ID).Scan(&secs).Error)
		if secs < -1 || secs > 1 {
			t.Errorf("snoozed for 200ms, next delivery in %.1fs", secs)
		}
		for deadline := time.Now().Add(10 * time.Second); statusOf(t, db, event(0).ID).Status != outbox.StatusPublished; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the snoozed event was not published: %+v", statusOf(t, db, event(0).ID))
			}
			_, err := r.RunOnce(t.Context())
			must(t, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(attempts) != 4 || attempts[3] != 1 {
			t.Errorf("deliveries of the snoozed event with attempts %v, want [1 1 1 1]", attempts)
		}
	})
}

// A snooze is about one event: the relay does not back off as it does
// when the publisher is unavailable.
func TestSnoozeDoesNotBackOff(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 20, event)
		var logs bytes.Buffer
		var mu sync.Mutex
		log := slog.New(slog.NewTextHandler(lockedBuffer{&mu, &logs}, nil))
		seen := map[string]bool{}
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			mu.Lock()
			defer mu.Unlock()
			if !seen[e.ID] {
				seen[e.ID] = true
				return outbox.Snooze(errors.New("not yet"), time.Millisecond)
			}
			return nil
		})
		runRelays(t, db, 1, pub, 30*time.Second, func() bool { return countStatus(t, db, outbox.StatusPublished) == 20 },
			relay.WithLogger(log), relay.WithBatchSize(5))
		mu.Lock()
		defer mu.Unlock()
		if strings.Contains(logs.String(), "unavailable") {
			t.Errorf("the relay backed off for snoozed events:\n%s", logs.String())
		}
	})
}

type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
