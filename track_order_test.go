package outbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/outboxtest"
)

// recordingPublisher keeps what the relay delivered, in order.
type recordingPublisher struct {
	mu  sync.Mutex
	got []*outbox.Envelope
}

func (r *recordingPublisher) Publish(_ context.Context, e *outbox.Envelope) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, e)
	return nil
}

// A row's lifecycle, written by concurrent transactions, is delivered by
// the relay in commit order: created, each update with the amount it
// wrote (1, 2, … n), deleted.
func TestTrackOrderThroughRelay(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		const rows, updates = 3, 8
		ids := make([]uint, rows)
		for i := range ids {
			p := Purchase{Customer: fmt.Sprint("c", i)}
			must(t, db.Create(&p).Error)
			ids[i] = p.ID
		}
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for n := range updates * rows / 4 {
					id := ids[(w+n)%rows]
					retry(t, func() error {
						return db.Model(&Purchase{}).Where("id = ?", id).Update("amount", gorm.Expr("amount + 1")).Error
					})
				}
			})
		}
		wg.Wait()
		for _, id := range ids {
			must(t, db.Delete(&Purchase{}, id).Error)
		}

		pub := &recordingPublisher{}
		outboxtest.Drain(t, db, pub)
		next := map[string]int{} // per aggregate: the amount its next update must carry
		for _, e := range pub.got {
			c, row, err := outbox.DecodeChange[Purchase](e.Payload)
			must(t, err)
			if row == nil || fmt.Sprint(row.ID) != e.AggregateID {
				t.Fatalf("%s %s: row %+v", e.Type, e.AggregateID, row)
			}
			n, seen := next[e.AggregateID]
			switch {
			case e.Type == "purchase.created" && !seen:
				next[e.AggregateID] = 1
			case e.Type == "purchase.updated" && seen && n > 0 && fmt.Sprint(c.New["amount"]) == fmt.Sprint(n) && fmt.Sprint(c.Old["amount"]) == fmt.Sprint(n-1):
				next[e.AggregateID] = n + 1
			case e.Type == "purchase.deleted" && seen && n == updates+1:
				next[e.AggregateID] = -1
			default:
				t.Fatalf("%s %s (old %v new %v) out of order: next amount %d, seen %v", e.Type, e.AggregateID, c.Old, c.New, n, seen)
			}
		}
		if len(pub.got) != rows*(updates+2) {
			t.Fatalf("%d events delivered, want %d", len(pub.got), rows*(updates+2))
		}
	})
}

// retry runs fn until it succeeds, as applications retry deadlocks.
func retry(t *testing.T, fn func() error) {
	var err error
	for range 20 {
		if err = fn(); err == nil {
			return
		}
	}
	t.Errorf("after 20 attempts: %v", err)
}
