package outbox_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func TestMaxPayloadSize(t *testing.T) {
	emit := func(db *gorm.DB, payload any) error {
		return db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{Type: "p", Payload: payload}) })
	}
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true, MaxPayloadSize: 100}))
		must(t, emit(db, bytes.Repeat([]byte("x"), 100)))
		err := emit(db, bytes.Repeat([]byte("x"), 101))
		if !errors.Is(err, outbox.ErrInvalidEvent) {
			t.Fatalf("101 bytes over a limit of 100: err = %v, want ErrInvalidEvent", err)
		}
		for _, want := range []string{"Payload", "101", "100"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		}
		// Marshalled payloads are measured as marshalled.
		if err := emit(db, strings.Repeat("x", 99)); !errors.Is(err, outbox.ErrInvalidEvent) { // 101 bytes of JSON
			t.Errorf("a JSON string of 101 bytes: err = %v, want ErrInvalidEvent", err)
		}
		if n := countEvents(t, db); n != 1 {
			t.Errorf("%d events, want 1", n)
		}
	})

	db := openSQLite(t)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true})) // the default: 1 MiB
	must(t, emit(db, make([]byte, outbox.DefaultMaxPayloadSize)))
	if err := emit(db, make([]byte, outbox.DefaultMaxPayloadSize+1)); !errors.Is(err, outbox.ErrInvalidEvent) {
		t.Errorf("over the default limit: err = %v, want ErrInvalidEvent", err)
	}

	db = openSQLite(t)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true, MaxPayloadSize: outbox.NoPayloadLimit}))
	must(t, emit(db, make([]byte, 3<<20)))
}
