package outbox_test

import (
	"encoding/json"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// Purchase is tracked: soft delete, an updated_at, lines saved with it.
type Purchase struct {
	ID        uint `gorm:"primaryKey"`
	Customer  string
	Status    string
	Amount    int
	UpdatedAt time.Time
	DeletedAt gorm.DeletedAt `gorm:"index"`
	Lines     []PurchaseLine
}

// PurchaseLine is tracked, and saved with its Purchase.
type PurchaseLine struct {
	ID         uint `gorm:"primaryKey"`
	PurchaseID uint
	SKU        string
	Qty        int
}

// LedgerEntry has a composite key and no soft delete.
type LedgerEntry struct {
	Book   string `gorm:"primaryKey;size:64"`
	Entry  int    `gorm:"primaryKey;autoIncrement:false"`
	Amount int
}

// trackedEvent is an outbox row of a tracked model, its payload decoded.
type trackedEvent struct {
	Type, AggregateType, AggregateID, PartitionKey, TenantID, Topic string
	Change                                                          outbox.Change
}

// eachTracked runs fn per dialect with the plugin installed and the test
// models migrated and tracked (opts apply to Purchase).
func eachTracked(t *testing.T, fn func(t *testing.T, db *gorm.DB), opts ...outbox.TrackOption) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) { fn(t, trackDB(t, db, opts...)) })
}

func trackDB(t testing.TB, db *gorm.DB, opts ...outbox.TrackOption) *gorm.DB {
	t.Helper()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		t.Fatalf("db.Use: %v", err)
	}
	if err := db.AutoMigrate(&Purchase{}, &PurchaseLine{}, &LedgerEntry{}); err != nil {
		t.Fatalf("AutoMigrate: %v", err)
	}
	for _, err := range []error{
		outbox.Track(db, &Purchase{}, opts...),
		outbox.Track(db, &PurchaseLine{}),
		outbox.Track(db, &LedgerEntry{}),
	} {
		if err != nil {
			t.Fatalf("Track: %v", err)
		}
	}
	return db
}

// tracked returns the outbox rows in id order, decoded.
func tracked(t testing.TB, db *gorm.DB) []trackedEvent {
	t.Helper()
	var rows []outbox.OutboxEvent
	if err := db.Order("id").Find(&rows).Error; err != nil {
		t.Fatalf("reading outbox: %v", err)
	}
	out := make([]trackedEvent, len(rows))
	for i, r := range rows {
		out[i] = trackedEvent{Type: r.Type, AggregateType: r.AggregateType, AggregateID: r.AggregateID,
			PartitionKey: r.PartitionKey, TenantID: r.TenantID, Topic: r.Topic}
		if err := json.Unmarshal(r.Payload, &out[i].Change); err != nil {
			t.Fatalf("event %d: payload %s: %v", r.ID, r.Payload, err)
		}
	}
	return out
}

// clearOutbox deletes every event, so that a test looks at one step.
func clearOutbox(t testing.TB, db *gorm.DB) {
	t.Helper()
	if err := db.Exec("DELETE FROM outbox_events").Error; err != nil {
		t.Fatal(err)
	}
}

// types returns "type aggregate_id" per event.
func types(evs []trackedEvent) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type + " " + e.AggregateID
	}
	return out
}

func wantTypes(t testing.TB, evs []trackedEvent, want ...string) {
	t.Helper()
	got := types(evs)
	if len(got) != len(want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("events %q, want %q", got, want)
		}
	}
}

// rowOf decodes an event's row.
func rowOf[T any](t testing.TB, e trackedEvent) T {
	t.Helper()
	var v T
	if len(e.Change.Row) == 0 {
		t.Fatalf("%s %s: no row in the payload", e.Type, e.AggregateID)
	}
	if err := json.Unmarshal(e.Change.Row, &v); err != nil {
		t.Fatalf("%s: row %s: %v", e.Type, e.Change.Row, err)
	}
	return v
}

func outboxTrackOldValues() outbox.TrackOption { return outbox.TrackOldValues() }
