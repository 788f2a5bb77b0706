package relay_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

var errFlaky = errors.New("flaky broker")

func TestRetryThenPublish(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		var attempts []int
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			attempts = append(attempts, e.Attempt)
			if e.Attempt < 3 {
				return errFlaky
			}
			return nil
		})
		r := newRelay(t, db, pub)
		for i, want := range []relay.Result{{Claimed: 1, Failed: 1}, {Claimed: 1, Failed: 1}, {Claimed: 1, Published: 1}} {
			res, err := r.RunOnce(t.Context())
			must(t, err)
			if res != want {
				t.Fatalf("run %d: %+v, want %+v", i, res, want)
			}
			row := statusOf(t, db, "ev-000000")
			if i < 2 && (row.Status != outbox.StatusFailed || row.LastError == nil || !strings.Contains(*row.LastError, "flaky broker") || row.Attempts != i+1) {
				t.Fatalf("after run %d: %+v", i, row)
			}
		}
		if len(attempts) != 3 || attempts[0] != 1 || attempts[2] != 3 {
			t.Errorf("Envelope.Attempt sequence %v, want [1 2 3]", attempts)
		}
	})
}

func TestBackoffSchedulesTheRetry(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		var asked []int
		r := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return errFlaky }),
			relay.WithBackoff(func(attempt int) time.Duration { asked = append(asked, attempt); return time.Hour }))
		res, err := r.RunOnce(t.Context())
		must(t, err)
		if res.Failed != 1 || len(asked) != 1 || asked[0] != 1 {
			t.Fatalf("result %+v, backoff asked for %v", res, asked)
		}
		// The retry is an hour away by the database clock: nothing to claim.
		res, err = r.RunOnce(t.Context())
		must(t, err)
		if res.Claimed != 0 {
			t.Fatalf("claimed an event scheduled an hour later: %+v", res)
		}
		var secs float64
		must(t, db.Raw("SELECT "+secondsUntil(db, "available_at")+" FROM outbox_events").Scan(&secs).Error)
		if secs < 3500 || secs > 3700 {
			t.Errorf("next attempt in %.0fs, want about 3600", secs)
		}
	})
}

// secondsUntil is an SQL expression for the seconds from now until col.
func secondsUntil(db *gorm.DB, col string) string {
	switch db.Dialector.Name() {
	case "postgres":
		return "EXTRACT(EPOCH FROM (" + col + " - now()))"
	case "mysql":
		return "TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(6), " + col + ")"
	default:
		return "(julianday(" + col + ") - julianday('now')) * 86400"
	}
}

func TestMaxAttemptsAndOnDead(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 2, func(i int) outbox.Event {
			e := event(i)
			if i == 1 {
				e.MaxAttempts = 1 // the event's own limit wins
			}
			return e
		})
		var mu sync.Mutex
		var deadIDs []string
		var reasons []error
		r := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return errFlaky }),
			relay.WithMaxAttempts(3),
			relay.WithOnDead(func(_ context.Context, e *outbox.Envelope, reason error) {
				mu.Lock()
				defer mu.Unlock()
				deadIDs = append(deadIDs, e.ID)
				reasons = append(reasons, reason)
			}))
		for range 4 {
			_, err := r.RunOnce(t.Context())
			must(t, err)
		}
		for id, attempts := range map[string]int{"ev-000000": 3, "ev-000001": 1} {
			row := statusOf(t, db, id)
			if row.Status != outbox.StatusDead || row.Attempts != attempts || !strings.Contains(*row.LastError, "no attempts left") {
				t.Errorf("%s: status %s attempts %d error %q", id, row.Status, row.Attempts, *row.LastError)
			}
		}
		if len(deadIDs) != 2 || !errors.Is(reasons[0], errFlaky) {
			t.Errorf("OnDead calls %v %v, want both events once, wrapping the error", deadIDs, reasons)
		}
	})
}

func TestPermanentIsDeadAtOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		dead := 0
		r := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			return outbox.Permanent(errors.New("no such customer"))
		}), relay.WithOnDead(func(context.Context, *outbox.Envelope, error) { dead++ }))
		res, err := r.RunOnce(t.Context())
		must(t, err)
		row := statusOf(t, db, "ev-000000")
		if res.Dead != 1 || dead != 1 || row.Status != outbox.StatusDead || row.Attempts != 1 || !strings.Contains(*row.LastError, "no such customer") {
			t.Errorf("result %+v, OnDead %d, row %+v", res, dead, row)
		}
	})
}

func TestUnavailableSpendsNoAttempt(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 5, event)
		calls := 0
		down := true
		pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			calls++
			if down {
				return outbox.Unavailable(errors.New("redis: connection refused"))
			}
			return nil
		})
		r := newRelay(t, db, pub, relay.WithConcurrency(1))
		res, err := r.RunOnce(t.Context())
		must(t, err)
		if res.Claimed != 5 || res.Released != 5 || calls != 1 {
			t.Fatalf("result %+v after %d publish calls; want all 5 released after the first call", res, calls)
		}
		for i := range 5 {
			row := statusOf(t, db, event(i).ID)
			if row.Status != outbox.StatusPending || row.Attempts != 0 || row.LockedBy != nil {
				t.Fatalf("released row %+v", row)
			}
		}
		// The released events wait out the relay's backoff (about a second).
		if res, _ := r.RunOnce(t.Context()); res.Claimed != 0 {
			t.Fatalf("claimed released events at once: %+v", res)
		}
		must(t, db.Exec("UPDATE outbox_events SET available_at = ?", past(db)).Error)
		down = false
		res, err = r.RunOnce(t.Context())
		must(t, err)
		if res.Published != 5 {
			t.Fatalf("after the outage: %+v", res)
		}
		if row := statusOf(t, db, event(0).ID); row.Attempts != 1 {
			t.Errorf("attempts after an outage and one delivery = %d, want 1", row.Attempts)
		}
	})
}

func TestPublisherPanicIsTransient(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 2, event)
		r := newRelay(t, db, relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			if e.ID == "ev-000000" {
				panic("nil map")
			}
			return nil
		}))
		res, err := r.RunOnce(t.Context())
		must(t, err)
		row := statusOf(t, db, "ev-000000")
		if res.Failed != 1 || res.Published != 1 || row.Status != outbox.StatusFailed || !strings.Contains(*row.LastError, "panicked: nil map") {
			t.Errorf("result %+v, row %+v", res, row)
		}
	})
}

func TestBadRowGoesDead(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 2, event)
		must(t, db.Exec("UPDATE outbox_events SET headers = ? WHERE event_id = ?", "{not json", "ev-000000").Error)
		must(t, db.Exec("UPDATE outbox_events SET headers = ? WHERE event_id = ?", `{"n": 1}`, "ev-000001").Error)
		pub := newRecorder()
		r := newRelay(t, db, pub)
		res, err := r.RunOnce(t.Context())
		must(t, err)
		if res.Dead != 2 || pub.delivered() != 0 {
			t.Fatalf("result %+v, %d delivered", res, pub.delivered())
		}
		if row := statusOf(t, db, "ev-000000"); !strings.Contains(*row.LastError, "headers") {
			t.Errorf("reason %q does not name the headers", *row.LastError)
		}
	})
}

func TestCrashLoopGoesDead(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		var dead []error
		r := newRelay(t, db, newRecorder(), relay.WithMaxAttempts(3), relay.WithBackoff(func(int) time.Duration { return time.Hour }),
			relay.WithOnDead(func(_ context.Context, _ *outbox.Envelope, reason error) { dead = append(dead, reason) }))
		// A relay that claims the event and crashes: the claim, then nothing,
		// and the lease runs out.
		crash := func() {
			must(t, db.Exec(`UPDATE outbox_events SET status = 'publishing', locked_by = 'crashed-relay', locked_until = ?,
				claim_version = claim_version + 1, attempts = attempts + 1 WHERE event_id = 'ev-000000'`, past(db)).Error)
		}
		for i := 1; i <= 3; i++ {
			crash()
			// The next relay rescues it before claiming: a crash spends an attempt.
			res, err := r.RunOnce(t.Context())
			must(t, err)
			row := statusOf(t, db, "ev-000000")
			if i < 3 {
				if row.Status != outbox.StatusFailed || !strings.Contains(*row.LastError, "lease expired") || res.Claimed != 0 {
					t.Fatalf("after crash %d: %+v (%+v)", i, row, res)
				}
				continue
			}
			if row.Status != outbox.StatusDead || !strings.Contains(*row.LastError, "crashed or stalled") || len(dead) != 1 {
				t.Fatalf("after crash %d: status %s, error %v, OnDead %v", i, row.Status, row.LastError, dead)
			}
		}
	})
}
