package relay_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// Two relays rescuing the same expired lease: one of them rescues it.
func TestConcurrentRescueIsCountedOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		var dead atomic.Int64
		onDead := relay.WithOnDead(func(context.Context, *outbox.Envelope, error) { dead.Add(1) })
		a := newRelay(t, db, newRecorder(), onDead, relay.WithMaxAttempts(1), relay.WithWorkerID("a"))
		b := newRelay(t, db, newRecorder(), onDead, relay.WithMaxAttempts(1), relay.WithWorkerID("b"))
		const rounds, perRound = 15, 6
		for i := range rounds {
			id := "r" + string(rune('a'+i))
			emitN(t, db, perRound, func(j int) outbox.Event { return outbox.Event{ID: id + string(rune('0'+j)), Type: "t"} })
			must(t, db.Exec(`UPDATE outbox_events SET status = 'publishing', locked_by = 'crashed', locked_until = ?,
				claim_version = 1, attempts = 1 WHERE status = 'pending'`, past(db)).Error)
			var wg sync.WaitGroup
			for _, r := range []*relay.Relay{a, b} {
				wg.Go(func() {
					if _, err := r.RunOnce(context.Background()); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if n := countStatus(t, db, outbox.StatusDead); n != int64((i+1)*perRound) {
				t.Fatalf("round %d: %d dead, want %d", i, n, (i+1)*perRound)
			}
		}
		if n := dead.Load(); n != rounds*perRound {
			t.Errorf("OnDead called %d times for %d dead events", n, rounds*perRound)
		}
	})
}
