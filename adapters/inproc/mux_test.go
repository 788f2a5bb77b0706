package inproc_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func eachMux(t *testing.T, fn func(t *testing.T, db *gorm.DB, mux *inproc.Mux)) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
		store, err := idempotency.NewStore(db)
		must(t, err)
		must(t, store.Migrate(t.Context()))
		fn(t, db, inproc.NewMux(store))
	})
}

func TestEveryHandlerOfTheTypeRuns(t *testing.T) {
	eachMux(t, func(t *testing.T, _ *gorm.DB, mux *inproc.Mux) {
		calls := map[string]int{}
		h := func(name string) consume.HandlerFunc {
			return func(context.Context, *outbox.Envelope) error { calls[name]++; return nil }
		}
		must(t, mux.Handle("order.created", "a", h("a")))
		must(t, mux.Handle("order.created", "b", h("b")))
		must(t, mux.Handle("order.paid", "c", h("c")))
		must(t, mux.Publish(t.Context(), &outbox.Envelope{ID: "e1", Type: "order.created"}))
		must(t, mux.Publish(t.Context(), &outbox.Envelope{ID: "e2", Type: "unknown"})) // no handler: delivered
		if calls["a"] != 1 || calls["b"] != 1 || calls["c"] != 0 {
			t.Errorf("calls %v", calls)
		}
	})
}

func TestRedeliverySkipsSucceededHandlers(t *testing.T) {
	eachMux(t, func(t *testing.T, db *gorm.DB, mux *inproc.Mux) {
		calls := map[string]int{}
		must(t, mux.HandleFunc("t", "steady", func(context.Context, *outbox.Envelope) error { calls["steady"]++; return nil }))
		must(t, mux.HandleFunc("t", "flaky", func(_ context.Context, e *outbox.Envelope) error {
			calls["flaky"]++
			if e.Attempt == 1 {
				return errors.New("smtp timeout")
			}
			return nil
		}))
		must(t, db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{Type: "t"}) }))
		r, err := relay.New(db, mux, relay.WithBackoff(func(int) time.Duration { return 0 }), relay.WithLogger(slog.New(slog.DiscardHandler)))
		must(t, err)
		res1, err := r.RunOnce(t.Context())
		must(t, err)
		res2, err := r.RunOnce(t.Context())
		must(t, err)
		if res1.Failed != 1 || res2.Published != 1 {
			t.Fatalf("runs %+v, %+v", res1, res2)
		}
		if calls["steady"] != 1 || calls["flaky"] != 2 {
			t.Errorf("calls %v: the handler that succeeded ran again, or the failed one did not", calls)
		}
	})
}

func TestTransactionalHandlerActsExactlyOnce(t *testing.T) {
	eachMux(t, func(t *testing.T, db *gorm.DB, mux *inproc.Mux) {
		must(t, db.Exec("CREATE TABLE ledger (event_id VARCHAR(64), amount INTEGER)").Error)
		failAfterWrite := true
		must(t, mux.HandleTx("payment.captured", "ledger", func(_ context.Context, tx *gorm.DB, e *outbox.Envelope) error {
			if err := tx.Exec("INSERT INTO ledger VALUES (?, 10)", e.ID).Error; err != nil {
				return err
			}
			if failAfterWrite {
				failAfterWrite = false
				return errors.New("crash after the write") // rolls the write back
			}
			return nil
		}))
		e := &outbox.Envelope{ID: "pay-1", Type: "payment.captured"}
		if err := mux.Publish(t.Context(), e); err == nil {
			t.Fatal("want the handler's error")
		}
		for range 3 { // redelivered
			must(t, mux.Publish(t.Context(), e))
		}
		var n int64
		must(t, db.Table("ledger").Count(&n).Error)
		if n != 1 {
			t.Errorf("%d ledger rows, want exactly 1", n)
		}
	})
}

func TestPermanentOnlyWhenEveryFailureIs(t *testing.T) {
	eachMux(t, func(t *testing.T, _ *gorm.DB, mux *inproc.Mux) {
		must(t, mux.HandleFunc("t", "perm", func(context.Context, *outbox.Envelope) error { return outbox.Permanent(errors.New("bad")) }))
		err := mux.Publish(t.Context(), &outbox.Envelope{ID: "e1", Type: "t"})
		if !outbox.IsPermanent(err) {
			t.Errorf("err = %v, want permanent", err)
		}
		must(t, mux.HandleFunc("t", "transient", func(context.Context, *outbox.Envelope) error { return errors.New("later") }))
		err = mux.Publish(t.Context(), &outbox.Envelope{ID: "e2", Type: "t"})
		if err == nil || outbox.IsPermanent(err) || !strings.Contains(err.Error(), "handler transient") {
			t.Errorf("err = %v, want a transient error naming the handler", err)
		}
	})
}

func TestHandlerRegistrationErrors(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	must(t, outbox.Migrate(db))
	store, err := idempotency.NewStore(db)
	must(t, err)
	mux := inproc.NewMux(store)
	ok := consume.HandlerFunc(func(context.Context, *outbox.Envelope) error { return nil })
	must(t, mux.Handle("t", "h", ok))
	for _, err := range []error{
		mux.Handle("", "h", ok),
		mux.Handle("t", "", ok),
		mux.Handle("t", "h", ok),
		mux.Handle("t", "nil", nil),
		mux.HandleFunc("t", "nilfunc", nil),
		mux.Handle("t", strings.Repeat("n", 200), ok),
		mux.HandleTx("t", "h", func(context.Context, *gorm.DB, *outbox.Envelope) error { return nil }),
	} {
		if !errors.Is(err, inproc.ErrInvalidHandler) {
			t.Errorf("err = %v, want ErrInvalidHandler", err)
		}
	}
}
