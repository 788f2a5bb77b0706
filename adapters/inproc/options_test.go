package inproc_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// NewMux records every bad option; Validate, and so relay.New, reports
// them, each wrapping ErrInvalidOption. Good options give a valid Mux.
func TestNewMuxReportsInvalidOptions(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	must(t, outbox.Migrate(db))
	store, err := idempotency.NewStore(db)
	must(t, err)
	bad := map[string]struct {
		store *idempotency.Store
		opts  []inproc.Option
		want  string
	}{
		"nil option":     {store, []inproc.Option{inproc.WithInProgressDelay(time.Second), nil}, "nil option"},
		"nil store":      {nil, nil, "store is nil"},
		"nil logger":     {store, []inproc.Option{inproc.WithLogger(nil)}, "logger is nil"},
		"negative delay": {store, []inproc.Option{inproc.WithInProgressDelay(-time.Second)}, "negative"},
		"nil registry":   {store, []inproc.Option{inproc.WithRegistry(nil)}, "registry is nil"},
	}
	for name, tc := range bad {
		t.Run(name, func(t *testing.T) {
			mux := inproc.NewMux(tc.store, tc.opts...)
			err := mux.Validate()
			if !errors.Is(err, inproc.ErrInvalidOption) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate() = %v; want ErrInvalidOption saying %q", err, tc.want)
			}
			if _, err := relay.New(db, mux); !errors.Is(err, inproc.ErrInvalidOption) {
				t.Errorf("relay.New = %v; want ErrInvalidOption", err)
			}
		})
	}
	good := inproc.NewMux(store, inproc.WithInProgressDelay(time.Second), inproc.WithRegistry(outbox.NewRegistry()))
	if err := good.Validate(); err != nil {
		t.Errorf("Validate() of good options = %v", err)
	}
}
