package relay_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// A batch claimed ahead that waits past half its lease (the batch before
// it was slow to deliver) is handed back undelivered and claimed again:
// its events carry a second claim version but spend no attempt, and each
// is delivered once. This is what a loaded machine does to a relay, and
// why "claimed more than once" alone does not mean two relays overlapped.
func TestClaimAheadReleasedAfterHalfTheLeaseSpendsNoAttempt(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		if db.Dialector.Name() == "sqlite" {
			t.Skip("SQLite takes one writer: its relay records inline and claims nothing ahead")
		}
		const n = 40
		emitN(t, db, n, event)
		var (
			mu    sync.Mutex
			count = map[string]int{}
			done  atomic.Int64
			slow  sync.Once
		)
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			// The first batch's delivery outlasts half the lease, so the
			// batch claimed ahead of it is too old to deliver.
			slow.Do(func() { time.Sleep(1300 * time.Millisecond) })
			mu.Lock()
			count[e.ID]++
			mu.Unlock()
			done.Add(1)
			return nil
		})
		r := newRelay(t, db, pub, relay.WithLease(2*time.Second), relay.WithBatchSize(10), relay.WithConcurrency(1),
			relay.WithPollInterval(10*time.Millisecond))
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() { errc <- r.Start(ctx) }()
		deadline := time.Now().Add(30 * time.Second)
		for done.Load() < n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		must(t, <-errc)

		for i := range n {
			if c := count[event(i).ID]; c != 1 {
				t.Errorf("event %s delivered %d times", event(i).ID, c)
			}
		}
		spent, released := claimCounts(t, db)
		if spent != 0 {
			t.Errorf("%d events spent more than one attempt", spent)
		}
		if released == 0 {
			t.Error("no event was claimed twice: the batch claimed ahead was delivered although it waited past half its lease")
		}
		t.Logf("%d events handed back undelivered and claimed again", released)
	})
}

// claimCounts counts the events that spent more than one attempt (a lease
// expired, or two claims overlapped) and those claimed more than once with
// one attempt spent (handed back undelivered, then claimed again).
func claimCounts(t testing.TB, db *gorm.DB) (spent, released int64) {
	t.Helper()
	must(t, db.Model(&outbox.OutboxEvent{}).Where("attempts <> 1").Count(&spent).Error)
	must(t, db.Model(&outbox.OutboxEvent{}).Where("attempts = 1 AND claim_version > 1").Count(&released).Error)
	return spent, released
}
