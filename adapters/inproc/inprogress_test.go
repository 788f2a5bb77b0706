package inproc_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
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

// A relay crashed while a handler ran: the handler's idempotency key stays
// held until the store's lease frees it, longer than the next relay's
// backoff. The event is handed back without spending attempts while the
// key is held, then handled once, not marked dead.
func TestHeldKeyDoesNotSpendAttempts(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
		store, err := idempotency.NewStore(db, idempotency.WithLease(time.Second))
		must(t, err)
		must(t, store.Migrate(t.Context()))
		mux := inproc.NewMux(store, inproc.WithInProgressDelay(100*time.Millisecond))
		var calls atomic.Int64
		must(t, mux.HandleFunc("order.created", "receipt", func(context.Context, *outbox.Envelope) error { calls.Add(1); return nil }))
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{ID: "ord-1", Type: "order.created", MaxAttempts: 3})
		}))

		// The crashed relay's handler holds the key (it never returns).
		holding, crashed := make(chan struct{}), make(chan struct{})
		var held sync.WaitGroup
		held.Go(func() {
			_ = store.Do(context.Background(), idempotency.HandlerKey("ord-1", "receipt"), func(context.Context) error {
				close(holding)
				<-crashed
				return nil
			})
		})
		t.Cleanup(func() { close(crashed); held.Wait() })
		<-holding

		r, err := relay.New(db, mux, relay.WithBackoff(func(int) time.Duration { return 0 }), relay.WithLogger(testenv.Logger(t)))
		must(t, err)
		var row outbox.OutboxEvent
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			_, err := r.RunOnce(t.Context())
			must(t, err)
			must(t, db.Where("event_id = ?", "ord-1").First(&row).Error)
			if row.Status == outbox.StatusPublished || row.Status == outbox.StatusDead || time.Now().After(deadline) {
				break
			}
		}
		if row.Status != outbox.StatusPublished || row.Attempts != 1 || calls.Load() != 1 {
			reason := ""
			if row.LastError != nil {
				reason = *row.LastError
			}
			t.Errorf("status %s after %d attempts (%s), handler ran %d times; want published after 1 attempt, handled once",
				row.Status, row.Attempts, reason, calls.Load())
		}
	})
}

// A key held by another delivery makes the Mux ask for a later delivery
// (outbox.Snooze) rather than fail; any other failure is a failure.
func TestHeldKeySnoozes(t *testing.T) {
	eachMux(t, func(t *testing.T, _ *gorm.DB, mux *inproc.Mux) {
		release, running := make(chan struct{}), make(chan struct{})
		must(t, mux.HandleFunc("t", "slow", func(context.Context, *outbox.Envelope) error {
			close(running)
			<-release
			return nil
		}))
		e := &outbox.Envelope{ID: "e1", Type: "t"}
		first := make(chan error, 1)
		go func() { first <- mux.Publish(context.Background(), e) }()
		<-running
		err := mux.Publish(t.Context(), e)
		if d, ok := outbox.SnoozeDelay(err); !ok || d != inproc.DefaultInProgressDelay || !errors.Is(err, idempotency.ErrInProgress) {
			t.Errorf("second delivery while the first runs: %v; want it snoozed for %v", err, inproc.DefaultInProgressDelay)
		}
		close(release)
		must(t, <-first)

		must(t, mux.HandleFunc("t2", "fails", func(context.Context, *outbox.Envelope) error { return errors.New("smtp down") }))
		if _, ok := outbox.SnoozeDelay(mux.Publish(t.Context(), &outbox.Envelope{ID: "e2", Type: "t2"})); ok {
			t.Error("an ordinary failure was snoozed")
		}
	})
}

// A handler's panic is recovered by the Mux, logged with the handler's
// name, and fails the delivery (to be retried).
func TestHandlerPanicNamesTheHandler(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, outbox.Migrate(db))
		store, err := idempotency.NewStore(db)
		must(t, err)
		var logs bytes.Buffer
		var mu sync.Mutex
		mux := inproc.NewMux(store, inproc.WithLogger(slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))))
		must(t, mux.HandleFunc("t", "calm", func(context.Context, *outbox.Envelope) error { return nil }))
		must(t, mux.HandleFunc("t", "send-receipt", func(context.Context, *outbox.Envelope) error { panic("nil map") }))
		must(t, mux.HandleTx("t", "ledger", func(context.Context, *gorm.DB, *outbox.Envelope) error { panic("bad row") }))

		err = func() (err error) {
			defer func() {
				if p := recover(); p != nil {
					err = errors.New("the panic escaped Publish")
				}
			}()
			return mux.Publish(t.Context(), &outbox.Envelope{ID: "e1", Type: "t"})
		}()
		if !errors.Is(err, consume.ErrHandlerPanic) || outbox.IsPermanent(err) ||
			!strings.Contains(err.Error(), "handler send-receipt") || !strings.Contains(err.Error(), "handler ledger") {
			t.Fatalf("err = %v; want a retryable ErrHandlerPanic naming both handlers", err)
		}
		mu.Lock()
		out := logs.String()
		mu.Unlock()
		for _, want := range []string{"handler=send-receipt", "handler=ledger", "panic=\"nil map\""} {
			if !strings.Contains(out, want) {
				t.Errorf("log lacks %s:\n%s", want, out)
			}
		}
		// The keys were released: a redelivery runs the handlers again.
		err = mux.Publish(t.Context(), &outbox.Envelope{ID: "e1", Type: "t"})
		if !errors.Is(err, consume.ErrHandlerPanic) {
			t.Errorf("redelivery: %v", err)
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
