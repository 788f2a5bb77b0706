package outboxredis_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func TestIdempotentHandlersSkipDuplicateEntries(t *testing.T) {
	rdb := newRedis(t)
	db, store := outboxDB(t, testenv.SQLite)
	must(t, db.Exec("CREATE TABLE ledger (event_id VARCHAR(64))").Error)
	stream := streamName(t, rdb, "con-idem")

	var plainRuns, txRuns, calls atomic.Int32
	failTxOnce := atomic.Bool{}
	failTxOnce.Store(true)
	plain := outboxredis.Idempotent(store, "mailer", outboxredis.HandlerFunc(func(context.Context, *outbox.Envelope) error {
		plainRuns.Add(1)
		return nil
	}))
	tx := outboxredis.IdempotentTx(store, "ledger", func(_ context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		txRuns.Add(1)
		if err := tx.Exec("INSERT INTO ledger VALUES (?)", e.ID).Error; err != nil {
			return err
		}
		if failTxOnce.CompareAndSwap(true, false) {
			return errors.New("fails after its write, which rolls back")
		}
		return nil
	})
	both := outboxredis.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		calls.Add(1)
		return errors.Join(plain.Handle(ctx, e), tx.Handle(ctx, e))
	})
	e := envelope("pay-1", "payment.captured")
	publish(t, rdb, stream, e, e, e) // the same event three times
	stop := run(t, outboxredis.NewConsumer(rdb, stream, "g", "c", both, consumerOpts(t)...))
	eventually(t, 10*time.Second, "every entry acknowledged", func() bool {
		return calls.Load() >= 4 && pendingCount(t, rdb, stream, "g") == 0
	})
	stop()

	var rows int64
	must(t, db.Table("ledger").Count(&rows).Error)
	if rows != 1 {
		t.Errorf("%d ledger rows, want exactly 1", rows)
	}
	if plainRuns.Load() != 1 {
		t.Errorf("plain idempotent handler ran %d times, want 1", plainRuns.Load())
	}
	if txRuns.Load() != 2 {
		t.Errorf("transactional handler ran %d times, want 2 (one rolled back, one committed)", txRuns.Load())
	}
	if calls.Load() != 4 {
		t.Errorf("handler called %d times, want 4 (three entries, one retried)", calls.Load())
	}
}
