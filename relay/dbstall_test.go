package relay_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// countingPublisher counts the deliveries of each event, and calls after
// in the n-th delivery, before it returns.
type countingPublisher struct {
	mu    sync.Mutex
	count map[string]int
	total int
	n     int
	after func()
}

func (p *countingPublisher) Publish(_ context.Context, e *outbox.Envelope) error {
	p.mu.Lock()
	p.count[e.ID]++
	p.total++
	hit := p.total == p.n
	p.mu.Unlock()
	if hit && p.after != nil {
		p.after()
	}
	return nil
}

// redelivered returns the events delivered more than once, with their
// delivery counts.
func (p *countingPublisher) redelivered() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for id, n := range p.count {
		if n > 1 {
			out[id] = n
		}
	}
	return out
}

// checkDeliveredOnce fails t unless each of the n events was delivered once
// and recorded published after one attempt.
func checkDeliveredOnce(t *testing.T, db *gorm.DB, pub *countingPublisher, n int) {
	t.Helper()
	if again := pub.redelivered(); len(again) > 0 {
		t.Errorf("%d of %d delivered events were delivered again: %v", len(again), n, again)
	}
	var rows []outbox.OutboxEvent
	must(t, db.Order("id").Find(&rows).Error)
	for _, row := range rows {
		if row.Status != outbox.StatusPublished || row.Attempts != 1 {
			t.Errorf("event %s: status %s, attempts %d, last error %v; want published after 1 attempt",
				row.EventID, row.Status, row.Attempts, deref(row.LastError))
		}
	}
}

// A database stall longer than the lease right after a batch was
// delivered (the connection holds every byte for 3s, lease 2s: no error,
// no reset) redelivers nothing: the completion arrives after the lease
// ended, but no other relay took the events (their claim_version is the
// one this relay claimed), so its outcomes are recorded.
func TestDatabaseStallDoesNotRedeliver(t *testing.T) {
	const n = 50
	for _, dialect := range []string{testenv.Postgres, testenv.MySQL} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			direct, proxied, p := throughProxy(t, dialect)
			emitN(t, direct, n, event)
			var resumed atomic.Bool
			pub := &countingPublisher{count: map[string]int{}, n: n, after: func() {
				p.Stall()
				time.AfterFunc(3*time.Second, func() { p.Resume(); resumed.Store(true) })
			}}
			runRelays(t, proxied, 1, pub, 30*time.Second, func() bool {
				return resumed.Load() && countStatus(t, direct, outbox.StatusPublished) == n
			}, relay.WithLease(2*time.Second), relay.WithBatchSize(n), relay.WithListen(false))
			checkDeliveredOnce(t, direct, pub, n)
		})
	}
}

// A completion that waits for a lock past the lease end (another
// transaction holds the batch's rows for 3s, lease 2s) records its
// outcomes: on PostgreSQL the fence's clock_timestamp() is read after the
// wait, so that a lease check refused them.
func TestCompletionAfterALockWaitIsRecorded(t *testing.T) {
	const n = 20
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, n, event)
		var holder sync.WaitGroup
		holder.Add(1)
		var locked atomic.Bool
		pub := &countingPublisher{count: map[string]int{}, n: n}
		pub.after = func() {
			ready := make(chan struct{})
			go func() {
				defer holder.Done()
				tx := db.Begin()
				if tx.Error != nil {
					t.Error(tx.Error)
					close(ready)
					return
				}
				lock := "SELECT id FROM outbox_events FOR UPDATE"
				if db.Dialector.Name() == testenv.SQLite {
					lock = "UPDATE outbox_events SET topic = topic WHERE id < 0" // the write lock (BEGIN IMMEDIATE)
				}
				if err := tx.Exec(lock).Error; err != nil {
					t.Error(err)
				}
				locked.Store(true)
				close(ready)
				time.Sleep(3 * time.Second)
				_ = tx.Commit()
			}()
			<-ready
		}
		runRelays(t, db, 1, pub, 30*time.Second, func() bool {
			return locked.Load() && countStatus(t, db, outbox.StatusPublished) == n
		}, relay.WithLease(2*time.Second), relay.WithBatchSize(n), relay.WithListen(false))
		holder.Wait()
		checkDeliveredOnce(t, db, pub, n)
	})
}
