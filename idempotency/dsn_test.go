package idempotency_test

import (
	"context"
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// With clientFoundRows=true (a common GORM DSN flag) MySQL reports 1 row
// for an ON DUPLICATE KEY UPDATE that changed nothing, as for an insert: a
// key that exists must still be recognised, so that fn runs once.
func TestClientFoundRowsRunsOnce(t *testing.T) {
	db := testenv.OpenMySQL(t, func(c *mysql.Config) { c.ClientFoundRows = true })
	must(t, idempotency.Migrate(t.Context(), db))
	s, err := idempotency.NewStore(db)
	must(t, err)
	ctx := t.Context()

	calls := 0
	for i := range 3 {
		if err := s.Do(ctx, "do", func(context.Context) error { calls++; return nil }); err != nil {
			t.Errorf("Do #%d: %v", i+1, err)
		}
	}
	if calls != 1 {
		t.Errorf("Do ran fn %d times for one key, want 1", calls)
	}

	calls = 0
	for i := range 3 {
		if err := s.DoTx(ctx, "dotx", func(*gorm.DB) error { calls++; return nil }); err != nil {
			t.Errorf("DoTx #%d: %v", i+1, err)
		}
	}
	if err := s.Do(ctx, "dotx", func(context.Context) error { calls++; return nil }); err != nil {
		t.Errorf("Do after DoTx: %v", err)
	}
	if calls != 1 {
		t.Errorf("DoTx/Do ran fn %d times for one key, want 1", calls)
	}

	calls = 0
	for i := range 2 {
		got, err := s.SideEffect(ctx, "effect", func(context.Context) ([]byte, error) { calls++; return []byte("receipt"), nil })
		if err != nil || string(got) != "receipt" {
			t.Errorf("SideEffect #%d = %q, %v", i+1, got, err)
		}
	}
	if calls != 1 {
		t.Errorf("SideEffect ran fn %d times for one key, want 1", calls)
	}

	// A key held by a running Do is in progress, not free.
	release := make(chan struct{})
	held := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Do(ctx, "held", func(context.Context) error { close(held); <-release; return nil })
	}()
	<-held
	err = s.Do(ctx, "held", func(context.Context) error { t.Error("fn ran while the key was held"); return nil })
	close(release)
	must(t, <-done)
	if !errors.Is(err, idempotency.ErrInProgress) {
		t.Errorf("Do of a held key = %v, want ErrInProgress", err)
	}
}
