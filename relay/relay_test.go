package relay_test

import (
	"encoding/json"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

func TestRunOnceDelivers(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 150, event)
		pub := newRecorder()
		r := newRelay(t, db, pub)
		res, err := r.RunOnce(t.Context())
		must(t, err)
		if res.Claimed != 100 || res.Published != 100 {
			t.Fatalf("first batch: %+v", res)
		}
		res, err = r.RunOnce(t.Context())
		must(t, err)
		if res.Claimed != 50 || res.Published != 50 {
			t.Fatalf("second batch: %+v", res)
		}
		res, err = r.RunOnce(t.Context())
		must(t, err)
		if res.Claimed != 0 {
			t.Fatalf("third batch: %+v", res)
		}
		if countStatus(t, db, outbox.StatusPublished) != 150 {
			t.Fatal("not all published")
		}
		var e *outbox.Envelope
		for _, d := range pub.deliveries { // deliveries run concurrently: find the first event
			if d.ID == "ev-000000" {
				e = d
			}
		}
		if e == nil {
			t.Fatal("ev-000000 was not delivered")
		}
		var p map[string]int
		must(t, json.Unmarshal(e.Payload, &p))
		if e.ID != "ev-000000" || e.Type != "test.event" || e.Attempt != 1 || e.Version != 1 || p["i"] != 0 || e.CreatedAt.IsZero() {
			t.Errorf("envelope = %+v", e)
		}
		row := statusOf(t, db, "ev-000000")
		if row.PublishedAt == nil || row.LockedBy != nil || row.LockedUntil != nil || row.Attempts != 1 || row.ClaimVersion != 1 {
			t.Errorf("row after publishing = %+v", row)
		}
	})
}
