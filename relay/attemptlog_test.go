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

// attemptsOf reads the attempt log of an event through an Inspector.
func attemptsOf(t *testing.T, db *gorm.DB, eventID string) []relay.Attempt {
	t.Helper()
	insp, err := relay.NewInspector(db)
	must(t, err)
	got, err := insp.Attempts(t.Context(), eventID)
	must(t, err)
	return got
}

// wantAttempts checks the outcomes, attempts and relays of got.
func wantAttempts(t *testing.T, got []relay.Attempt, want ...relay.Attempt) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("attempt log %+v, want %d records %+v", got, len(want), want)
	}
	for i, w := range want {
		g := got[i]
		if g.Outcome != w.Outcome || g.Attempt != w.Attempt || g.RelayID != w.RelayID || g.ClaimVersion != w.ClaimVersion ||
			!strings.Contains(g.Error, w.Error) || (w.Error == "" && g.Error != "") || g.CreatedAt.IsZero() {
			t.Errorf("record %d: %+v, want %s of attempt %d (claim %d) by %s, error %q", i, g, w.Outcome, w.Attempt, w.ClaimVersion, w.RelayID, w.Error)
		}
	}
}

// A delivery that fails twice then succeeds leaves three records: retried,
// retried (each with its error and duration), published.
func TestAttemptLogRetriedThenPublished(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			time.Sleep(2 * time.Millisecond)
			if e.Attempt < 3 {
				return errFlaky
			}
			return nil
		})
		r := newRelay(t, db, pub, relay.WithAttemptLog(), relay.WithWorkerID("w1"))
		for range 3 {
			_, err := r.RunOnce(t.Context())
			must(t, err)
		}
		got := attemptsOf(t, db, event(0).ID)
		wantAttempts(t, got,
			relay.Attempt{Outcome: relay.AttemptRetried, Attempt: 1, ClaimVersion: 1, RelayID: "w1", Error: "flaky broker"},
			relay.Attempt{Outcome: relay.AttemptRetried, Attempt: 2, ClaimVersion: 2, RelayID: "w1", Error: "flaky broker"},
			relay.Attempt{Outcome: relay.AttemptPublished, Attempt: 3, ClaimVersion: 3, RelayID: "w1"})
		for _, a := range got {
			if a.Duration < 2*time.Millisecond || a.Duration > time.Minute || a.EventID != event(0).ID {
				t.Errorf("record %+v: want the delivery's duration (at least 2ms) and the event id", a)
			}
		}
	})
}

// An event out of attempts ends with a dead record.
func TestAttemptLogDead(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return errFlaky })
		r := newRelay(t, db, pub, relay.WithAttemptLog(), relay.WithWorkerID("w1"), relay.WithMaxAttempts(2))
		for range 2 {
			_, err := r.RunOnce(t.Context())
			must(t, err)
		}
		wantAttempts(t, attemptsOf(t, db, event(0).ID),
			relay.Attempt{Outcome: relay.AttemptRetried, Attempt: 1, ClaimVersion: 1, RelayID: "w1", Error: "flaky broker"},
			relay.Attempt{Outcome: relay.AttemptDead, Attempt: 2, ClaimVersion: 2, RelayID: "w1", Error: "no attempts left (2 of 2)"})
	})
}

// A snoozed delivery is logged as snoozed, spending no attempt: the next
// claim has the same attempt number.
func TestAttemptLogSnoozed(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		snoozed := false
		pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			if !snoozed {
				snoozed = true
				return outbox.Snooze(errors.New("not yet"), time.Millisecond)
			}
			return nil
		})
		r := newRelay(t, db, pub, relay.WithAttemptLog(), relay.WithWorkerID("w1"))
		_, err := r.RunOnce(t.Context())
		must(t, err)
		time.Sleep(20 * time.Millisecond)
		_, err = r.RunOnce(t.Context())
		must(t, err)
		wantAttempts(t, attemptsOf(t, db, event(0).ID),
			relay.Attempt{Outcome: relay.AttemptSnoozed, Attempt: 1, ClaimVersion: 1, RelayID: "w1", Error: "not yet"},
			relay.Attempt{Outcome: relay.AttemptPublished, Attempt: 1, ClaimVersion: 2, RelayID: "w1"})
	})
}

// A relay whose lease expired mid-delivery, and whose claim another relay
// rescued meanwhile, has its completion refused by fencing: it writes no
// record for its stale claim. The log shows the rescue of that claim and
// the other relay's publication.
func TestAttemptLogFencedCompletionWritesNone(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		blocked, unblock := make(chan struct{}), make(chan struct{})
		var once sync.Once
		stale := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			once.Do(func() { close(blocked) })
			<-unblock
			return nil
		}), relay.WithWorkerID("stale"), relay.WithLease(time.Minute), relay.WithAttemptLog())
		staleRes := make(chan relay.Result, 1)
		go func() {
			res, err := stale.RunOnce(context.Background())
			if err != nil {
				t.Error(err)
			}
			staleRes <- res
		}()
		<-blocked
		// The lease runs out, another relay rescues the claim and delivers
		// the event; then the stale relay's completion comes, and is
		// refused.
		must(t, db.Exec("UPDATE outbox_events SET locked_until = ? WHERE locked_by = 'stale'", past(db)).Error)
		res, err := newRelay(t, db, newRecorder(), relay.WithWorkerID("fresh"), relay.WithAttemptLog()).RunOnce(t.Context())
		must(t, err)
		if res.Published != 1 {
			t.Fatalf("fresh relay %+v; want the event redelivered", res)
		}
		close(unblock)
		if res := <-staleRes; res.Lost != 1 {
			t.Fatalf("stale relay %+v; want its completion lost", res)
		}
		wantAttempts(t, attemptsOf(t, db, event(0).ID),
			relay.Attempt{Outcome: relay.AttemptRescued, Attempt: 1, ClaimVersion: 1, RelayID: "fresh", Error: "lease expired"},
			relay.Attempt{Outcome: relay.AttemptPublished, Attempt: 2, ClaimVersion: 3, RelayID: "fresh"})
	})
}

// A relay whose lease expired mid-delivery, but whose claim nobody took
// over, records its outcome (and its attempt record) when the delivery
// ends: the claim_version is still the one it claimed.
func TestAttemptLogLateCompletionOfAnUntakenClaim(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 1, event)
		blocked, unblock := make(chan struct{}), make(chan struct{})
		var once sync.Once
		late := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			once.Do(func() { close(blocked) })
			<-unblock
			return nil
		}), relay.WithWorkerID("late"), relay.WithLease(time.Minute), relay.WithAttemptLog())
		lateRes := make(chan relay.Result, 1)
		go func() {
			res, err := late.RunOnce(context.Background())
			if err != nil {
				t.Error(err)
			}
			lateRes <- res
		}()
		<-blocked
		must(t, db.Exec("UPDATE outbox_events SET locked_until = ? WHERE locked_by = 'late'", past(db)).Error)
		close(unblock)
		if res := <-lateRes; res.Published != 1 || res.Lost != 0 {
			t.Fatalf("late relay %+v; want its outcome recorded", res)
		}
		row := statusOf(t, db, event(0).ID)
		if row.Status != outbox.StatusPublished || row.Attempts != 1 || row.ClaimVersion != 1 {
			t.Errorf("event: status %s, attempts %d, claim_version %d; want published after its one claim", row.Status, row.Attempts, row.ClaimVersion)
		}
		wantAttempts(t, attemptsOf(t, db, event(0).ID),
			relay.Attempt{Outcome: relay.AttemptPublished, Attempt: 1, ClaimVersion: 1, RelayID: "late"})
	})
}

// Without the option nothing is logged.
func TestAttemptLogOffWritesNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 2, event)
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			if e.ID == event(1).ID {
				return errFlaky
			}
			return nil
		})
		_, err := newRelay(t, db, pub).RunOnce(t.Context())
		must(t, err)
		var n int64
		must(t, db.Table("outbox_events_attempts").Count(&n).Error)
		if n != 0 {
			t.Fatalf("%d records without WithAttemptLog, want none", n)
		}
	})
}

// Retention and the purges delete the records with their events, and
// keep the records of the events they keep.
func TestAttemptLogDeletedWithEvent(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 4, event)
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			if e.ID == event(2).ID {
				return outbox.Permanent(errFlaky)
			}
			return nil
		})
		_, err := newRelay(t, db, pub, relay.WithAttemptLog()).RunOnce(t.Context())
		must(t, err)
		records := func() (n int64) {
			must(t, db.Table("outbox_events_attempts").Count(&n).Error)
			return n
		}
		if n := records(); n != 4 {
			t.Fatalf("%d records, want 4", n)
		}
		// The janitor of a relay (without the option) deletes old published
		// events with their records.
		must(t, db.Exec("UPDATE outbox_events SET published_at = ? WHERE event_id = ?", past(db), event(0).ID).Error)
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		r := newRelay(t, db, newRecorder(), relay.WithRetention(time.Hour))
		go func() { _ = r.Start(ctx) }()
		for records() != 3 && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if n := records(); n != 3 {
			t.Fatalf("%d records after retention, want 3", n)
		}
		insp, err := relay.NewInspector(db)
		must(t, err)
		_, err = insp.PurgePublished(t.Context(), 0)
		must(t, err)
		if got := attemptsOf(t, db, event(2).ID); len(got) != 1 || got[0].Outcome != relay.AttemptDead || records() != 1 {
			t.Fatalf("after purging published events: %d records, dead event's %+v; want only the dead one's", records(), got)
		}
		_, err = insp.PurgeDead(t.Context(), time.Nanosecond)
		must(t, err)
		if n := records(); n != 0 {
			t.Fatalf("%d records after purging dead events, want none", n)
		}
	})
}

// WithAttemptLog needs the attempt log table (migration 0007): New names
// it. Without the table, relays that do not log still run, purges still
// delete, and Inspector.Attempts says the table is missing.
func TestAttemptLogNeedsItsTable(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Exec("DROP TABLE outbox_events_attempts").Error)
		_, err := relay.New(db, newRecorder(), relay.WithAttemptLog())
		if !errors.Is(err, outbox.ErrNotMigrated) || !strings.Contains(err.Error(), "outbox_events_attempts") {
			t.Fatalf("New with the attempt log and no table: %v, want ErrNotMigrated naming it", err)
		}
		emitN(t, db, 1, event)
		_, err = newRelay(t, db, newRecorder()).RunOnce(t.Context())
		must(t, err)
		insp, err := relay.NewInspector(db)
		must(t, err)
		if _, err := insp.Attempts(t.Context(), event(0).ID); !errors.Is(err, outbox.ErrNotMigrated) {
			t.Errorf("Attempts without the table: %v, want ErrNotMigrated", err)
		}
		if n, err := insp.PurgePublished(t.Context(), 0); err != nil || n != 1 {
			t.Errorf("PurgePublished without the attempt log table: %d, %v; want 1 deleted", n, err)
		}
	})
}

// A batch larger than one completion statement (chunks of 1000) with
// every outcome carrying an error is logged whole: the records stay
// within every database's limit of bind parameters.
func TestAttemptLogLargeBatch(t *testing.T) {
	const n = 2500
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, n, event)
		res, err := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return errFlaky }),
			relay.WithBatchSize(n), relay.WithConcurrency(50), relay.WithLease(10*time.Minute), relay.WithAttemptLog()).RunOnce(t.Context())
		must(t, err)
		var logged int64
		must(t, db.Table("outbox_events_attempts").Where("outcome = ? AND error LIKE ?", relay.AttemptRetried, "%flaky broker%").Count(&logged).Error)
		if res.Failed != n || logged != n {
			t.Fatalf("%+v, %d retried records; want %d of each", res, logged, n)
		}
	})
}
