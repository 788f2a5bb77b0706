package adapterkit

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
)

func TestEncodeEnvelope(t *testing.T) {
	e := &outbox.Envelope{ID: "ev-1", Type: "t", Payload: []byte(`{"a":1}`)}
	b, err := EncodeEnvelope(e, "shop", errors.New("bad"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := outbox.DecodeEnvelope(b)
	if err != nil || got.Source != "shop" || got.ID != "ev-1" || e.Source != "" {
		t.Errorf("decoded %+v (%v); the caller's source %q", got, err, e.Source)
	}
	e.Source = "billing"
	if b, _ = EncodeEnvelope(e, "shop", nil); !strings.Contains(string(b), `"source":"billing"`) {
		t.Errorf("an envelope's own source was replaced: %s", b)
	}
	sentinel := errors.New("invalid message")
	far := &outbox.Envelope{ID: "ev-2", Type: "t", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := EncodeEnvelope(far, "s", sentinel); !errors.Is(err, sentinel) || !outbox.IsPermanent(err) {
		t.Errorf("an envelope that does not encode: %v", err)
	}
}
