package outboxasynq_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// eachStore runs fn per dialect with a migrated idempotency store.
func eachStore(t *testing.T, fn func(t *testing.T, db *gorm.DB, store *idempotency.Store)) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		_, store := setupDB(t, db)
		fn(t, db, store)
	})
}

func TestIdempotentRunsAHandlerOncePerEvent(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *gorm.DB, store *idempotency.Store) {
		calls := &counters{}
		fail := map[string]bool{"ev-b": true} // fails its first run
		inner := outboxasynq.Handler(func(_ context.Context, e *outbox.Envelope) error {
			if calls.inc(e.ID) == 1 && fail[e.ID] {
				return errors.New("smtp timeout")
			}
			return nil
		})
		billing := outboxasynq.Idempotent(store, "billing")(inner)
		audit := outboxasynq.Idempotent(store, "audit")(inner)

		a := sampleEnvelope("ev-a", "q")
		must(t, billing.ProcessTask(t.Context(), taskOf(t, a)))
		// The same event again: a duplicate task, a retry, a replay.
		redelivered := *a
		redelivered.Attempt = 2
		must(t, billing.ProcessTask(t.Context(), taskOf(t, &redelivered)))
		must(t, billing.ProcessTask(t.Context(), taskOf(t, a)))
		if n := calls.get("ev-a"); n != 1 {
			t.Fatalf("billing ran %d times for one event", n)
		}
		// Another handler name is another record.
		must(t, audit.ProcessTask(t.Context(), taskOf(t, a)))
		if n := calls.get("ev-a"); n != 2 {
			t.Errorf("audit did not run: %d calls", n)
		}

		// A failure records nothing: the retry runs the handler again.
		b := sampleEnvelope("ev-b", "q")
		if err := billing.ProcessTask(t.Context(), taskOf(t, b)); err == nil || errors.Is(err, asynq.SkipRetry) {
			t.Fatalf("first run: %v, want a retryable error", err)
		}
		must(t, billing.ProcessTask(t.Context(), taskOf(t, b)))
		must(t, billing.ProcessTask(t.Context(), taskOf(t, b)))
		if n := calls.get("ev-b"); n != 2 {
			t.Errorf("ev-b ran %d times, want 2 (a failure, then one success)", n)
		}
	})
}

func TestIdempotentReturnsInProgressForAConcurrentDelivery(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *gorm.DB, store *idempotency.Store) {
		started, release := make(chan struct{}), make(chan struct{})
		calls := &counters{}
		h := outboxasynq.Idempotent(store, "slow")(outboxasynq.Handler(func(_ context.Context, e *outbox.Envelope) error {
			if calls.inc(e.ID) == 1 {
				close(started)
				<-release
			}
			return nil
		}))
		task := taskOf(t, sampleEnvelope("ev-slow", "q"))
		first := make(chan error, 1)
		go func() { first <- h.ProcessTask(context.Background(), task) }()
		<-started
		err := h.ProcessTask(t.Context(), task)
		close(release)
		if !errors.Is(err, idempotency.ErrInProgress) || errors.Is(err, asynq.SkipRetry) {
			t.Errorf("concurrent delivery: %v, want a retryable ErrInProgress", err)
		}
		if outboxasynq.IsFailure(err) {
			t.Error("IsFailure counts ErrInProgress against the task's retries")
		}
		must(t, <-first)
		must(t, h.ProcessTask(t.Context(), task)) // succeeded meanwhile: skipped
		if n := calls.get("ev-slow"); n != 1 {
			t.Errorf("handler ran %d times", n)
		}
	})
}

type ledgerRow struct {
	ID      uint
	EventID string
}

func TestIdempotentTxCommitsTheEffectWithItsRecord(t *testing.T) {
	eachStore(t, func(t *testing.T, db *gorm.DB, store *idempotency.Store) {
		must(t, db.AutoMigrate(&ledgerRow{}))
		calls := &counters{}
		h := outboxasynq.IdempotentTx(store, "ledger")(outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
			n := calls.inc(e.ID)
			tx := outboxasynq.Tx(ctx)
			if tx == nil {
				return errors.New("no transaction in the handler's context")
			}
			if err := tx.Create(&ledgerRow{EventID: e.ID}).Error; err != nil {
				return err
			}
			if n == 1 {
				return errors.New("failed after writing") // rolls the write back
			}
			return nil
		}))
		task := taskOf(t, sampleEnvelope("ev-ledger", "q"))
		if err := h.ProcessTask(t.Context(), task); err == nil {
			t.Fatal("first run succeeded")
		}
		must(t, h.ProcessTask(t.Context(), task))
		must(t, h.ProcessTask(t.Context(), task))
		var rows int64
		must(t, db.Model(&ledgerRow{}).Where("event_id = ?", "ev-ledger").Count(&rows).Error)
		if rows != 1 || calls.get("ev-ledger") != 2 {
			t.Errorf("%d ledger rows after %d runs, want 1 row after 2 runs", rows, calls.get("ev-ledger"))
		}
		if outboxasynq.Tx(t.Context()) != nil {
			t.Error("Tx outside IdempotentTx is not nil")
		}
	})
}

func TestIdempotentArchivesMalformedPayloads(t *testing.T) {
	_, store := setupDB(t, testenv.Open(t, testenv.SQLite))
	called := false
	next := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { called = true; return nil })
	for _, mw := range []asynq.MiddlewareFunc{outboxasynq.Idempotent(store, "h"), outboxasynq.IdempotentTx(store, "h")} {
		err := mw(next).ProcessTask(t.Context(), asynq.NewTask("t", []byte("{")))
		if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, outboxasynq.ErrInvalidTask) {
			t.Errorf("got %v", err)
		}
	}
	if called {
		t.Error("the handler ran on a malformed payload")
	}
}

func TestIdempotentPanicsOnMisuse(t *testing.T) {
	_, store := setupDB(t, testenv.Open(t, testenv.SQLite))
	for name, f := range map[string]func(){
		"nil store":     func() { outboxasynq.Idempotent(nil, "h") },
		"empty name":    func() { outboxasynq.Idempotent(store, "") },
		"long name":     func() { outboxasynq.IdempotentTx(store, strings.Repeat("x", idempotency.MaxHandlerNameLen+1)) },
		"tx nil store":  func() { outboxasynq.IdempotentTx(nil, "h") },
		"tx empty name": func() { outboxasynq.IdempotentTx(store, "") },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
	outboxasynq.Idempotent(store, strings.Repeat("x", idempotency.MaxHandlerNameLen)) // the longest name fits
}

func TestIsFailure(t *testing.T) {
	cause := errors.New("x")
	for err, want := range map[error]bool{
		nil:                       false,
		cause:                     true,
		outbox.Permanent(cause):   true,
		outbox.Unavailable(cause): false,
		idempotency.ErrInProgress: false,
		errors.Join(cause, idempotency.ErrInProgress): false,
	} {
		if got := outboxasynq.IsFailure(err); got != want {
			t.Errorf("IsFailure(%v) = %v", err, got)
		}
	}
}
