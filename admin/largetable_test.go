package admin_test

import (
	"net/http"
	"strings"
	"testing"

	"gorm.io/gorm"
)

// The partition key filter with any status lists the key's unfinished
// and dead events (read from their indexes) and says so; its published
// events are listed with status published. On PostgreSQL the page says
// that the aggregate filter has no index.
func TestKeyFilterAndIndexNotes(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		must(t, db.Exec("UPDATE outbox_events SET status = 'published', published_at = created_at WHERE event_id = 'ev-11'").Error)
		c := newClient(t, newHandler(t, db))
		code, body := c.get("/events?key=customer:42")
		if code != http.StatusOK {
			t.Fatalf("key filter: %d %s", code, body)
		}
		contains(t, "key filter", body, "fail-1", "ev-12", `id="key-note"`)
		if strings.Contains(body, "ev-11") {
			t.Errorf("the key filter with any status lists the key's published event")
		}
		_, body = c.get("/events?key=customer:42&status=published")
		contains(t, "key filter, published", body, "ev-11")
		if strings.Contains(body, "fail-1") || strings.Contains(body, `id="key-note"`) {
			t.Errorf("status published lists other events, or the note")
		}
		pg := db.Dialector.Name() == "postgres"
		if got := strings.Contains(body, `id="aggregate-note"`); got != pg {
			t.Errorf("aggregate note shown: %v, want %v (PostgreSQL only)", got, pg)
		}
	})
}

// On PostgreSQL a table holding more than 10,000 published events shows
// their count as an estimate, labeled.
func TestPublishedEstimateLabeled(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		if db.Dialector.Name() != "postgres" {
			t.Skip("only PostgreSQL estimates")
		}
		must(t, db.Exec(`INSERT INTO outbox_events (event_id, type, status, published_at)
			SELECT 'h-' || g, 't', 'published', now() - interval '2 hours' FROM generate_series(1, 10050) g`).Error)
		must(t, db.Exec("ANALYZE outbox_events").Error)
		_, body := newClient(t, newHandler(t, db)).get("/")
		contains(t, "overview", body, "published (estimate)", `id="estimate"`)
	})
}
