package outboxamqp_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// The same event delivered three times (duplicates a relay makes after a
// crash), its transactional handler failing once after its write: the
// plain handler runs once, the transactional one's write commits once.
func TestIdempotentHandlersSkipDuplicates(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		_, store := setupDB(t, db)
		must(t, db.Exec("CREATE TABLE ledger (event_id VARCHAR(64))").Error)
		q := queue(t, "idem", nil)
		var plainRuns, txRuns, calls atomic.Int32
		var failTxOnce atomic.Bool
		failTxOnce.Store(true)
		plain := outboxamqp.Idempotent(store, "mailer", outboxamqp.HandlerFunc(func(context.Context, *outbox.Envelope) error {
			plainRuns.Add(1)
			return nil
		}))
		tx := outboxamqp.IdempotentTx(store, "ledger", func(_ context.Context, tx *gorm.DB, e *outbox.Envelope) error {
			txRuns.Add(1)
			if err := tx.Exec("INSERT INTO ledger VALUES (?)", e.ID).Error; err != nil {
				return err
			}
			if failTxOnce.CompareAndSwap(true, false) {
				return errors.New("fails after its write, which rolls back")
			}
			return nil
		})
		both := outboxamqp.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
			calls.Add(1)
			return errors.Join(plain.Handle(ctx, e), tx.Handle(ctx, e))
		})
		e := envelope("pay-1", "payment.captured", q)
		publish(t, q, e, e, e)
		stop := runConsumer(t, newConsumer(t, dial(t), q, both))
		eventually(t, 10*time.Second, "every message settled", func() bool { return calls.Load() >= 4 && depth(t, q) == 0 })
		stop()

		var rows int64
		must(t, db.Table("ledger").Count(&rows).Error)
		if rows != 1 {
			t.Errorf("%d ledger rows, want exactly 1", rows)
		}
		if n := plainRuns.Load(); n != 1 {
			t.Errorf("plain idempotent handler ran %d times, want 1", n)
		}
		if n := txRuns.Load(); n != 2 {
			t.Errorf("transactional handler ran %d times, want 2 (one rolled back, one committed)", n)
		}
		if n := calls.Load(); n != 4 {
			t.Errorf("handler called %d times, want 4 (three messages, one retried)", n)
		}
		var ok int64
		must(t, db.Table(store.Table()).Where("idempotency_key = ?", idempotency.HandlerKey("pay-1", "ledger")).Count(&ok).Error)
		if ok != 1 {
			t.Errorf("%d records under the handler key, want 1", ok)
		}
	})
}
