package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func eachStore(t *testing.T, fn func(t *testing.T, db *gorm.DB, s *idempotency.Store), opts ...idempotency.Option) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, idempotency.Migrate(t.Context(), db, opts...))
		must(t, idempotency.Migrate(t.Context(), db, opts...)) // idempotent
		s, err := idempotency.NewStore(db, opts...)
		must(t, err)
		fn(t, db, s)
	})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestDoRunsOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *gorm.DB, s *idempotency.Store) {
		calls := 0
		fn := func(context.Context) error { calls++; return nil }
		for range 3 {
			must(t, s.Do(t.Context(), "k1", fn))
		}
		if calls != 1 {
			t.Errorf("fn ran %d times, want 1", calls)
		}
		must(t, s.Do(t.Context(), "K1", fn)) // keys are case-sensitive
		if calls != 2 {
			t.Errorf("a key differing in case did not run")
		}
	})
}

func TestDoFailureLeavesKeyRetryable(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *gorm.DB, s *idempotency.Store) {
		boom := errors.New("boom")
		calls := 0
		err := s.Do(t.Context(), "k", func(context.Context) error { calls++; return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v, want fn's error", err)
		}
		must(t, s.Do(t.Context(), "k", func(context.Context) error { calls++; return nil }))
		must(t, s.Do(t.Context(), "k", func(context.Context) error { calls++; return nil }))
		if calls != 2 {
			t.Errorf("fn ran %d times, want 2 (the failure, then one success)", calls)
		}

		// A panic releases the key too.
		func() {
			defer func() { _ = recover() }()
			_ = s.Do(t.Context(), "p", func(context.Context) error { panic("boom") })
		}()
		ran := false
		must(t, s.Do(t.Context(), "p", func(context.Context) error { ran = true; return nil }))
		if !ran {
			t.Error("the key of a panicking fn was not released")
		}
	})
}

func TestConcurrentDoRunsOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *gorm.DB, s *idempotency.Store) {
		const callers = 8
		var calls, inProgress atomic.Int32
		var wg sync.WaitGroup
		release := make(chan struct{})
		for range callers {
			wg.Go(func() {
				err := s.Do(t.Context(), "shared", func(context.Context) error {
					calls.Add(1)
					<-release // hold the key until every other caller has tried
					return nil
				})
				if errors.Is(err, idempotency.ErrInProgress) {
					if inProgress.Add(1) == callers-1 {
						close(release)
					}
					return
				}
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if calls.Load() != 1 || inProgress.Load() != callers-1 {
			t.Errorf("fn ran %d times and %d callers got ErrInProgress; want 1 and %d", calls.Load(), inProgress.Load(), callers-1)
		}
		// Afterwards the key is done for everyone.
		must(t, s.Do(t.Context(), "shared", func(context.Context) error { t.Error("ran again"); return nil }))
	})
}

func TestDoTakesOverAfterTheLease(t *testing.T) {
	eachStore(t, func(t *testing.T, db *gorm.DB, s *idempotency.Store) {
		// A holder that died: its record stays running until the lease ends.
		started := make(chan struct{})
		go func() {
			_ = s.Do(context.WithoutCancel(t.Context()), "dead-holder", func(context.Context) error {
				close(started)
				select {} // never returns: a hung or dead process
			})
		}()
		<-started
		err := s.Do(t.Context(), "dead-holder", func(context.Context) error { return nil })
		if !errors.Is(err, idempotency.ErrInProgress) {
			t.Fatalf("err = %v, want ErrInProgress while the lease runs", err)
		}
		if err := s.DoTx(t.Context(), "dead-holder", func(*gorm.DB) error { return nil }); !errors.Is(err, idempotency.ErrInProgress) {
			t.Fatalf("DoTx: err = %v, want ErrInProgress while the lease runs", err)
		}
		// Expire the lease (instead of waiting for it).
		must(t, db.Exec("UPDATE outbox_idempotency SET locked_until = ? WHERE idempotency_key = ?", past(db), "dead-holder").Error)
		ran := false
		must(t, s.Do(t.Context(), "dead-holder", func(context.Context) error { ran = true; return nil }))
		if !ran {
			t.Error("fn did not run after the holder's lease expired")
		}

		// DoTx takes over from a dead holder too.
		started2 := make(chan struct{})
		go func() {
			_ = s.Do(context.WithoutCancel(t.Context()), "dead-holder-2", func(context.Context) error {
				close(started2)
				select {}
			})
		}()
		<-started2
		must(t, db.Exec("UPDATE outbox_idempotency SET locked_until = ? WHERE idempotency_key = ?", past(db), "dead-holder-2").Error)
		ranTx := false
		must(t, s.DoTx(t.Context(), "dead-holder-2", func(*gorm.DB) error { ranTx = true; return nil }))
		if !ranTx {
			t.Error("DoTx did not run after the holder's lease expired")
		}
		must(t, s.Do(t.Context(), "dead-holder-2", func(context.Context) error { t.Error("ran again after DoTx"); return nil }))
	}, idempotency.WithLease(time.Minute))
}

// past is a time long gone, as the dialect stores times.
func past(db *gorm.DB) any {
	if db.Dialector.Name() == "sqlite" {
		return "2000-01-01 00:00:00.000000000+00:00"
	}
	return "2000-01-01 00:00:00"
}

func TestDoTx(t *testing.T) {
	eachStore(t, func(t *testing.T, db *gorm.DB, s *idempotency.Store) {
		must(t, db.Exec("CREATE TABLE effects (id INTEGER PRIMARY KEY, note VARCHAR(50))").Error)
		write := func(id int) func(tx *gorm.DB) error {
			return func(tx *gorm.DB) error { return tx.Exec("INSERT INTO effects (id, note) VALUES (?, 'x')", id).Error }
		}
		must(t, s.DoTx(t.Context(), "tx-1", write(1)))
		must(t, s.DoTx(t.Context(), "tx-1", write(1))) // skipped: no duplicate key error
		// A failing fn rolls back its writes and the record.
		boom := errors.New("boom")
		err := s.DoTx(t.Context(), "tx-2", func(tx *gorm.DB) error {
			if err := write(2)(tx); err != nil {
				return err
			}
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("err = %v", err)
		}
		must(t, s.DoTx(t.Context(), "tx-2", write(2)))
		var n int64
		must(t, db.Table("effects").Count(&n).Error)
		if n != 2 {
			t.Errorf("%d effects, want 2", n)
		}
		// Do and DoTx share keys.
		must(t, s.Do(t.Context(), "tx-1", func(context.Context) error { t.Error("Do ran a key DoTx did"); return nil }))
	})
}

func TestConcurrentDoTxRunsOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, db *gorm.DB, s *idempotency.Store) {
		must(t, db.Exec("CREATE TABLE counter (id INTEGER PRIMARY KEY, n INTEGER)").Error)
		must(t, db.Exec("INSERT INTO counter VALUES (1, 0)").Error)
		for round := range 10 {
			key := fmt.Sprintf("round-%d", round)
			var wg sync.WaitGroup
			for range 6 {
				wg.Go(func() {
					for {
						err := s.DoTx(t.Context(), key, func(tx *gorm.DB) error {
							return tx.Exec("UPDATE counter SET n = n + 1 WHERE id = 1").Error
						})
						if isDeadlock(err) {
							continue // InnoDB, first concurrent inserts of a new key: retry
						}
						if err != nil {
							t.Error(err)
						}
						return
					}
				})
			}
			wg.Wait()
		}
		var n int
		must(t, db.Raw("SELECT n FROM counter WHERE id = 1").Scan(&n).Error)
		if n != 10 {
			t.Errorf("counter = %d, want 10 (one increment per key)", n)
		}
	})
}

func isDeadlock(err error) bool { return err != nil && strings.Contains(err.Error(), "1213") }

func TestSideEffect(t *testing.T) {
	eachStore(t, func(t *testing.T, _ *gorm.DB, s *idempotency.Store) {
		// A handler that charges a card through an external stub, then fails.
		stubCalls := 0
		charge := func(context.Context) ([]byte, error) {
			stubCalls++
			return []byte(fmt.Sprintf("charge-%d", stubCalls)), nil
		}
		handler := func(ctx context.Context) error {
			receipt, err := s.SideEffect(ctx, "event-1:charge", charge)
			if err != nil {
				return err
			}
			if string(receipt) != "charge-1" {
				t.Errorf("receipt = %q, want the first call's result", receipt)
			}
			return errors.New("failed after the charge")
		}
		for range 3 { // delivered three times
			if err := handler(t.Context()); err == nil {
				t.Fatal("handler succeeded")
			}
		}
		if stubCalls != 1 {
			t.Errorf("the stub was called %d times, want 1", stubCalls)
		}

		// A failed external call stores nothing and is retried.
		failures := 0
		_, err := s.SideEffect(t.Context(), "flaky", func(context.Context) ([]byte, error) { failures++; return nil, errors.New("timeout") })
		if err == nil {
			t.Fatal("want the call's error")
		}
		got, err := s.SideEffect(t.Context(), "flaky", func(context.Context) ([]byte, error) { return []byte("ok"), nil })
		must(t, err)
		if string(got) != "ok" {
			t.Errorf("retry result = %q", got)
		}

		type receipt struct{ ID string }
		r1, err := idempotency.SideEffectJSON(t.Context(), s, "json", func(context.Context) (receipt, error) { return receipt{"r-1"}, nil })
		must(t, err)
		r2, err := idempotency.SideEffectJSON(t.Context(), s, "json", func(context.Context) (receipt, error) { return receipt{"r-2"}, nil })
		must(t, err)
		if r1.ID != "r-1" || r2.ID != "r-1" {
			t.Errorf("results %v, %v; want r-1 twice", r1, r2)
		}
	})
}

func TestPurge(t *testing.T) {
	eachStore(t, func(t *testing.T, db *gorm.DB, s *idempotency.Store) {
		must(t, s.Do(t.Context(), "old", func(context.Context) error { return nil }))
		must(t, s.Do(t.Context(), "new", func(context.Context) error { return nil }))
		must(t, db.Exec("UPDATE outbox_idempotency SET expires_at = ? WHERE idempotency_key = 'old'", past(db)).Error)
		n, err := s.Purge(t.Context())
		must(t, err)
		if n != 1 {
			t.Fatalf("purged %d, want 1", n)
		}
		ran := false
		must(t, s.Do(t.Context(), "old", func(context.Context) error { ran = true; return nil }))
		must(t, s.Do(t.Context(), "new", func(context.Context) error { t.Error("a live key ran again"); return nil }))
		if !ran {
			t.Error("a purged key did not run again")
		}
	})
}

func TestInvalidKeysAndOptions(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	must(t, idempotency.Migrate(t.Context(), db))
	s, err := idempotency.NewStore(db)
	must(t, err)
	for _, k := range []string{"", strings.Repeat("k", 256), "bad\xff"} {
		if err := s.Do(t.Context(), k, func(context.Context) error { return nil }); !errors.Is(err, idempotency.ErrInvalidKey) {
			t.Errorf("key %q: err = %v, want ErrInvalidKey", k, err)
		}
	}
	for _, o := range []idempotency.Option{idempotency.WithTable("x; drop"), idempotency.WithTTL(0), idempotency.WithLease(time.Millisecond)} {
		if _, err := idempotency.NewStore(db, o); !errors.Is(err, idempotency.ErrInvalidOption) {
			t.Errorf("err = %v, want ErrInvalidOption", err)
		}
	}
}
