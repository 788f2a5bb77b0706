package admin_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// The event page's attempts table gives each record's receipt
// (relay.SetReceipt: where the publisher says the event went), escaped
// like every other value, on the published record only; the page still
// renders for an event of a relay without the attempt log, and without
// the attempt log table.
func TestEventPageReceipts(t *testing.T) {
	const hostile = `orders/<b>2</b>@41&`
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		relayReceipts(t, db, true, map[string]string{"rc-1": hostile, "rc-2": "orders/0@7"}, "rc-1", "rc-2", "rc-3")
		relayReceipts(t, db, false, map[string]string{"rc-4": "orders/1@3"}, "rc-4")
		c := newClient(t, newHandler(t, db))

		rows := attemptRows(t, c, "rc-1")
		if len(rows) != 2 || !strings.Contains(rows[0], "retried") || strings.Contains(rows[0], "orders/") ||
			!strings.Contains(rows[1], "published") || !strings.Contains(rows[1], `orders/&lt;b&gt;2&lt;/b&gt;@41&amp;`) {
			t.Errorf("rc-1: attempts %q, want a retried record without a receipt, then a published one with %q escaped", rows, hostile)
		}
		if _, body := c.get("/events/rc-1"); strings.Contains(body, "<b>2</b>") {
			t.Errorf("rc-1: the receipt reached the page unescaped")
		}
		if rows := attemptRows(t, c, "rc-2"); len(rows) != 1 || !strings.Contains(rows[0], "orders/0@7") {
			t.Errorf("rc-2: attempts %q, want one with orders/0@7", rows)
		}
		if rows := attemptRows(t, c, "rc-3"); len(rows) != 1 || !strings.Contains(rows[0], "published") || strings.Contains(rows[0], "orders/") {
			t.Errorf("rc-3: attempts %q, want one published record without a receipt", rows)
		}
		if code, body := c.get("/events/rc-4"); code != http.StatusOK || !strings.Contains(body, `id="no-attempts"`) || strings.Contains(body, "orders/1@3") {
			t.Errorf("rc-4, relayed without the attempt log: %d, want 200 with no attempts\n%s", code, body)
		}
		must(t, db.Exec("DROP TABLE outbox_events_attempts").Error)
		if code, body := c.get("/events/rc-1"); code != http.StatusOK || !strings.Contains(body, "No attempt log table") || strings.Contains(body, "orders/") {
			t.Errorf("rc-1 without the attempt log table: %d, want 200 saying so\n%s", code, body)
		}
	})
}

// attemptRows returns the rows of the event page's attempts table.
func attemptRows(t *testing.T, c *client, id string) []string {
	t.Helper()
	code, body := c.get("/events/" + id)
	i := strings.Index(body, `id="attempts"`)
	if code != http.StatusOK || i < 0 {
		t.Fatalf("event %s: %d, no attempts table\n%s", id, code, body)
	}
	table := body[i:]
	table = table[strings.Index(table, "<tbody>")+len("<tbody>") : strings.Index(table, "</tbody>")]
	return strings.Split(strings.TrimSpace(table), "\n")
}

// relayReceipts emits the events ids and relays them, with the attempt
// log when logged: the first of them fails once, then each is published
// with its receipt in receipts, if any.
func relayReceipts(t *testing.T, db *gorm.DB, logged bool, receipts map[string]string, ids ...string) {
	t.Helper()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		for _, id := range ids {
			if err := outbox.Emit(tx, outbox.Event{ID: id, Type: "receipted"}); err != nil {
				return err
			}
		}
		return nil
	}))
	pub := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
		if e.ID == ids[0] && e.Attempt == 1 {
			return errors.New("broker timeout")
		}
		relay.SetReceipt(ctx, e, receipts[e.ID])
		return nil
	})
	opts := []relay.Option{relay.WithBackoff(func(int) time.Duration { return 0 }), relay.WithLogger(slog.New(slog.DiscardHandler))}
	if logged {
		opts = append(opts, relay.WithAttemptLog())
	}
	r, err := relay.New(db, pub, opts...)
	must(t, err)
	for range 2 {
		_, err := r.RunOnce(t.Context())
		must(t, err)
	}
}
