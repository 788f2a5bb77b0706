package relay_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// killAll marks every event dead through a relay whose publisher refuses them.
func killAll(t *testing.T, db *gorm.DB) {
	t.Helper()
	r := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
		return outbox.Permanent(errFlaky)
	}), relay.WithBatchSize(1000))
	_, err := r.RunOnce(t.Context())
	must(t, err)
}

func TestDeadLetterOperations(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 25, func(i int) outbox.Event {
			e := event(i)
			if i%5 == 0 {
				e.Type = "other.event"
			}
			return e
		})
		killAll(t, db)
		ctx := t.Context()

		// Paging through all dead events, oldest first.
		var all []string
		f := relay.Filter{Limit: 10}
		for {
			page, err := inspector(t, db).ListDead(ctx, f)
			must(t, err)
			if len(page) == 0 {
				break
			}
			for _, e := range page {
				all = append(all, e.EventID)
			}
			f.AfterID = page[len(page)-1].ID
		}
		if len(all) != 25 || all[0] != "ev-000000" || all[24] != "ev-000024" {
			t.Fatalf("paged %d dead events: %v", len(all), all)
		}
		others, err := inspector(t, db).ListDead(ctx, relay.Filter{Type: "other.event"})
		must(t, err)
		if len(others) != 5 {
			t.Errorf("%d dead of type other.event, want 5", len(others))
		}
		old, err := inspector(t, db).ListDead(ctx, relay.Filter{OlderThan: time.Hour})
		must(t, err)
		if len(old) != 0 {
			t.Errorf("%d dead events older than an hour, want 0", len(old))
		}

		// Replay by id: only dead events, back to pending with a clean slate.
		n, err := inspector(t, db).Replay(ctx, "ev-000001", "ev-000002", "no-such-event")
		must(t, err)
		if n != 2 {
			t.Errorf("replayed %d, want 2", n)
		}
		row := statusOf(t, db, "ev-000001")
		if row.Status != outbox.StatusPending || row.Attempts != 0 || row.LastError != nil || row.LockedBy != nil {
			t.Errorf("replayed row %+v", row)
		}
		if n, _ := inspector(t, db).Replay(ctx, "ev-000001"); n != 0 {
			t.Errorf("replaying a pending event counted %d", n)
		}

		// Replay all of a type, in batches.
		n, err = inspector(t, db).ReplayAll(ctx, relay.Filter{Type: "other.event", Limit: 2})
		must(t, err)
		if n != 5 {
			t.Errorf("ReplayAll(type) replayed %d, want 5", n)
		}
		stats, err := inspector(t, db).GetStats(ctx)
		must(t, err)
		if stats.Counts[outbox.StatusPending] != 7 || stats.Counts[outbox.StatusDead] != 18 {
			t.Errorf("counts %v, want 7 pending and 18 dead", stats.Counts)
		}
		// Replayed events are delivered again.
		pub := newRecorder()
		res, err := newRelay(t, db, pub).RunOnce(ctx)
		must(t, err)
		if res.Published != 7 {
			t.Errorf("delivered %+v after replay", res)
		}
		n, err = inspector(t, db).ReplayAll(ctx, relay.Filter{})
		must(t, err)
		if n != 18 {
			t.Errorf("ReplayAll replayed %d, want 18", n)
		}
	})
}

func TestStats(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		s, err := inspector(t, db).GetStats(t.Context())
		must(t, err)
		if len(s.Counts) != 0 || s.OldestPendingAge != 0 {
			t.Errorf("empty table: %+v", s)
		}
		emitN(t, db, 4, event)
		must(t, db.Exec("UPDATE outbox_events SET available_at = ? WHERE event_id = 'ev-000000'", agoText(db, 90*time.Second)).Error)
		_, err = newRelay(t, db, newRecorder(), relay.WithBatchSize(1)).RunOnce(t.Context()) // publishes the oldest
		must(t, err)
		must(t, db.Exec("UPDATE outbox_events SET available_at = ? WHERE event_id = 'ev-000001'", agoText(db, 30*time.Second)).Error)
		s, err = inspector(t, db).GetStats(t.Context())
		must(t, err)
		if s.Counts[outbox.StatusPending] != 3 || s.Counts[outbox.StatusPublished] != 1 {
			t.Errorf("counts %v", s.Counts)
		}
		if s.OldestPendingAge < 25*time.Second || s.OldestPendingAge > 40*time.Second {
			t.Errorf("oldest pending age %v, want about 30s", s.OldestPendingAge)
		}
	})
}

// agoText is now minus d, as the dialect stores times (UTC).
func agoText(db *gorm.DB, d time.Duration) string {
	t := time.Now().Add(-d).UTC()
	if db.Dialector.Name() == "sqlite" {
		return t.Format("2006-01-02 15:04:05.000000000+00:00")
	}
	return t.Format("2006-01-02 15:04:05.000000")
}

func TestRetention(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 30, event)
		_, err := newRelay(t, db, newRecorder(), relay.WithBatchSize(20)).RunOnce(t.Context())
		must(t, err)
		// 10 published long ago, 10 just now, 10 still pending; 5 dead long ago.
		must(t, db.Exec("UPDATE outbox_events SET published_at = ? WHERE event_id < 'ev-000010'", agoText(db, 48*time.Hour)).Error)
		must(t, db.Exec("UPDATE outbox_events SET status = 'dead', created_at = ? WHERE event_id >= 'ev-000025'", agoText(db, 48*time.Hour)).Error)

		// The relay deletes old published events as it runs.
		pub := newRecorder()
		runRelays(t, db, 1, pub, 30*time.Second, func() bool {
			var n int64
			db.Model(&outbox.OutboxEvent{}).Count(&n)
			return n == 20
		}, relay.WithRetention(24*time.Hour))
		if countStatus(t, db, outbox.StatusPublished) != 15 || countStatus(t, db, outbox.StatusDead) != 5 {
			t.Errorf("after retention: %d published, %d dead; want 15 and 5 (dead are kept)",
				countStatus(t, db, outbox.StatusPublished), countStatus(t, db, outbox.StatusDead))
		}

		// Purges by the operator.
		n, err := inspector(t, db).PurgePublished(t.Context(), time.Hour)
		must(t, err)
		if n != 0 {
			t.Errorf("purged %d published events younger than an hour", n)
		}
		n, err = inspector(t, db).PurgePublished(t.Context(), 0)
		must(t, err)
		if n != 15 {
			t.Errorf("PurgePublished(0) deleted %d, want 15", n)
		}
		n, err = inspector(t, db).PurgeDead(t.Context(), 24*time.Hour)
		must(t, err)
		if n != 5 {
			t.Errorf("PurgeDead deleted %d, want 5", n)
		}
	})
}
