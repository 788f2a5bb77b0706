package relay_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// The largest accepted batch is claimed and completed correctly whatever
// its outcomes: the completion must stay within every database's limit of
// bind parameters per statement (PostgreSQL and MySQL 65,535, SQLite
// 32,766).
func TestLargestBatchCompletes(t *testing.T) {
	const n = 10000
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, n, event)
		run := func(pub relay.PublisherFunc) relay.Result {
			t.Helper()
			// A long lease: this is about statement limits, not speed, and
			// the test machine may be slow.
			res, err := newRelay(t, db, pub, relay.WithBatchSize(n), relay.WithConcurrency(50),
				relay.WithLease(10*time.Minute)).RunOnce(t.Context())
			if err != nil {
				t.Fatalf("RunOnce: %v", err)
			}
			if n := countStatus(t, db, outbox.StatusPublishing); n != 0 {
				t.Fatalf("%d events left publishing (%+v)", n, res)
			}
			return res
		}

		// The transport is down: all released, no attempt spent.
		res := run(func(context.Context, *outbox.Envelope) error { return outbox.Unavailable(errors.New("broker down")) })
		if res.Claimed != n || res.Released != n {
			t.Errorf("unavailable: %+v, want %d claimed and released", res, n)
		}
		var spent int64
		must(t, db.Model(&outbox.OutboxEvent{}).Where("attempts <> 0 OR status <> ?", outbox.StatusPending).Count(&spent).Error)
		if spent != 0 {
			t.Errorf("unavailable: %d events spent an attempt or are not pending", spent)
		}
		// Make the released events claimable at once.
		must(t, db.Exec("UPDATE outbox_events SET available_at = ?", past(db)).Error)

		// Every delivery fails: all failed, each with its attempt spent.
		res = run(func(context.Context, *outbox.Envelope) error { return errFlaky })
		if res.Claimed != n || res.Failed != n {
			t.Errorf("failing: %+v, want %d claimed and failed", res, n)
		}
		if got := countStatus(t, db, outbox.StatusFailed); got != n {
			t.Errorf("failing: %d failed, want %d", got, n)
		}

		// Every delivery succeeds.
		res = run(func(context.Context, *outbox.Envelope) error { return nil })
		if res.Claimed != n || res.Published != n {
			t.Errorf("publishing: %+v, want %d claimed and published", res, n)
		}
		if got := countStatus(t, db, outbox.StatusPublished); got != n {
			t.Errorf("publishing: %d published, want %d", got, n)
		}
	})
}
