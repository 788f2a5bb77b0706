package outbox_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// 8 writers × 500 transactions, half of them rolled back at random: exactly
// the committed transactions' events exist, on every dialect.
func TestConcurrentWritersWithRandomRollbacks(t *testing.T) {
	const writers, txs = 8, 500
	errRollback := errors.New("rollback on purpose")
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		var (
			mu        sync.Mutex
			committed = map[string]bool{}
			wg        sync.WaitGroup
			deadlocks atomic.Int64
		)
		for w := range writers {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), 42))
				for i := range txs {
					id := fmt.Sprintf("w%d-%d", w, i)
					rollback := rng.IntN(2) == 0
				retry:
					err := db.Transaction(func(tx *gorm.DB) error {
						order := Order{Customer: id}
						if i%2 == 0 {
							order.Key = fmt.Sprintf("key-%d", i%4) // keyed events take the per-key lock
						}
						if err := tx.Create(&order).Error; err != nil {
							return err
						}
						if err := outbox.Emit(tx, outbox.Event{ID: id, Type: "tx.done", PartitionKey: order.Key}); err != nil {
							return err
						}
						if rollback {
							return errRollback
						}
						return nil
					})
					switch {
					case isDeadlock(err):
						// InnoDB: the first concurrent writers of a brand-new
						// partition key can deadlock on its lock row; the
						// transaction rolled back and is retried, as an
						// application retries any deadlock.
						deadlocks.Add(1)
						goto retry
					case err == nil:
						mu.Lock()
						committed[id] = true
						mu.Unlock()
					case !errors.Is(err, errRollback):
						t.Errorf("transaction %s: %v", id, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if n := deadlocks.Load(); n > 0 {
			t.Logf("%d transactions retried after a deadlock", n)
		}

		var ids []string
		must(t, db.Model(&outbox.OutboxEvent{}).Where("type = ?", "tx.done").Pluck("event_id", &ids).Error)
		if len(ids) != len(committed) {
			t.Errorf("%d events, want %d (one per committed transaction)", len(ids), len(committed))
		}
		for _, id := range ids {
			if !committed[id] {
				t.Errorf("event %s exists but its transaction rolled back", id)
			}
		}
		if n := countEvents(t, db, "type = ?", "order.created"); n != int64(len(committed)) {
			t.Errorf("%d order.created events, want %d", n, len(committed))
		}
		if len(committed) < writers*txs/3 || len(committed) > writers*txs*2/3 {
			t.Errorf("%d of %d committed: the random rollbacks are not about half", len(committed), writers*txs)
		}
	})
}

func isDeadlock(err error) bool {
	var my *mysql.MySQLError
	return errors.As(err, &my) && my.Number == 1213
}
