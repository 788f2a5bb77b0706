package outbox_test

import (
	"encoding/json"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// bare is a registered struct payload with no required field.
type bare struct {
	N int `json:"n"`
}

// A type registered with a struct payload refuses an event without one:
// nil, a nil *T, JSON null, empty bytes. A zero T is a payload.
func TestRegistryRefusesMissingStructPayload(t *testing.T) {
	reg := outbox.NewRegistry()
	must(t, outbox.Register[bare](reg, "bare.done", 1))
	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		emit := func(p any) error {
			return db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{Type: "bare.done", Payload: p}) })
		}
		for name, p := range map[string]any{
			"nil": nil, "nil *T": (*bare)(nil), "RawMessage null": json.RawMessage("null"),
			"empty bytes": []byte{}, "empty RawMessage": json.RawMessage(""), "blank bytes": []byte("  "),
		} {
			if err := emit(p); !errors.Is(err, outbox.ErrInvalidEvent) {
				t.Errorf("payload %s: %v, want ErrInvalidEvent", name, err)
			}
		}
		for name, p := range map[string]any{"T": bare{}, "*T": &bare{N: 1}, "JSON": json.RawMessage(`{"n":2}`)} {
			must(t, emit(p))
			_ = name
		}
		if n := countEvents(t, db); n != 3 {
			t.Errorf("%d events, want 3", n)
		}
	})
	for _, p := range []string{"", "null", " null "} {
		if err := reg.Check(&outbox.Envelope{Type: "bare.done", Payload: []byte(p)}); !errors.Is(err, outbox.ErrInvalidEvent) {
			t.Errorf("Check of payload %q: %v, want ErrInvalidEvent", p, err)
		}
	}
}
