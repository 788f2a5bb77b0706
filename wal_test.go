package outbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// WAL mode runs on PostgreSQL only: MySQL and SQLite are refused by Use,
// naming what is needed; PostgreSQL without wal_level=logical (the shared
// test server) is refused naming the fix. The tests on a server with
// wal_level=logical are in tests/ (wal_*_test.go), which start their own.
func TestWALRefused(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		err := db.Use(&outbox.Plugin{WAL: &outbox.WAL{}})
		var level string
		if db.Dialector.Name() == "postgres" {
			if e := db.Raw(`SELECT current_setting('wal_level')`).Scan(&level).Error; e != nil {
				t.Fatal(e)
			}
		}
		switch {
		case db.Dialector.Name() != "postgres":
			if !errors.Is(err, outbox.ErrWALNotReady) || !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), "PostgreSQL 14") {
				t.Errorf("Use in WAL mode on %s: %v, want a refusal naming PostgreSQL 14", db.Dialector.Name(), err)
			}
		case level != "logical":
			if !errors.Is(err, outbox.ErrWALNotReady) || !strings.Contains(err.Error(), "wal_level = logical") {
				t.Errorf("Use in WAL mode with wal_level %s: %v, want a refusal naming wal_level = logical", level, err)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), "outbox migrate --wal") {
				t.Errorf("Use in WAL mode without the slot: %v, want a refusal naming outbox migrate --wal", err)
			}
		}
	})
}

// Bad slot names are refused by Use on every dialect.
func TestWALBadSlotName(t *testing.T) {
	db := testenv.Open(t, "sqlite")
	err := db.Use(&outbox.Plugin{WAL: &outbox.WAL{Slot: "no-dashes; drop"}})
	if !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("Use with a bad slot name: %v", err)
	}
}

// A WAL message is the event's CloudEvents JSON with maxattempts and
// availableat: DecodeEnvelope reads it as an envelope, DecodeWALMessage
// with both.
func TestWALMessageFormat(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	m := &outbox.WALMessage{Envelope: &outbox.Envelope{ID: "e1", Type: "order.placed", PartitionKey: "k", Payload: []byte(`{"a":1}`),
		Headers: map[string]string{"actor": "ada"}}, MaxAttempts: 3, AvailableAt: at}
	b, err := m.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"specversion", "id", "source", "type", "data", "partitionkey", "maxattempts", "availableat"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("attribute %s missing from %s", k, b)
		}
	}
	back, err := outbox.DecodeWALMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.MaxAttempts != 3 || !back.AvailableAt.Equal(at) || back.Envelope.ID != "e1" || back.Envelope.Headers["actor"] != "ada" {
		t.Errorf("decoded %+v %+v", back, back.Envelope)
	}
	if env, err := outbox.DecodeEnvelope(b); err != nil || env.ID != "e1" {
		t.Errorf("DecodeEnvelope of a WAL message: %v, %v", env, err)
	}
	if _, err := outbox.DecodeWALMessage([]byte(`{"specversion":"1.0","id":"x","source":"s","type":"t","maxattempts":-1}`)); !errors.Is(err, outbox.ErrInvalidEnvelope) {
		t.Errorf("negative maxattempts: %v", err)
	}
	if p := outbox.WALPrefix("outbox_events"); p != "gorm-outbox:outbox_events" {
		t.Errorf("WALPrefix = %q", p)
	}
}
