package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// show gives each attempt log record's receipt (relay.SetReceipt: where
// the publisher says the event went): a RECEIPT column in text, escaped
// like every other cell, and a "receipt" field in JSON, left out of a
// record without one.
func TestShowReceipts(t *testing.T) {
	const where, hostile = "orders/2@41", "orders/0@7\x1b[31mred"
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			relayWithReceipts(t, db, map[string]string{"r1": where, "r2": hostile})

			r := cmd(t, u, "show", "r1").ok(t)
			log := r.stdout[strings.Index(r.stdout, "attempt log:"):]
			log = log[:strings.Index(log, "\npayload")]
			lines := strings.Split(strings.TrimSpace(log), "\n")
			if len(lines) != 4 || !strings.Contains(lines[1], "RECEIPT") || !strings.Contains(lines[2], "retried") ||
				strings.Contains(lines[2], where) || !strings.Contains(lines[3], "published") || !strings.Contains(lines[3], where) {
				t.Errorf("show r1: want a RECEIPT column with %s on the published record only:\n%s", where, log)
			}
			type attempts struct {
				AttemptLog []map[string]any `json:"attempt_log"`
			}
			a := decodeJSON[attempts](t, cmd(t, u, "show", "--json", "r1").ok(t).stdout).AttemptLog
			if _, has := a[0]["receipt"]; len(a) != 2 || has || a[0]["outcome"] != "retried" ||
				a[1]["outcome"] != "published" || a[1]["receipt"] != where {
				t.Errorf("show --json r1: attempt log %v, want a retried record without a receipt, then a published one with %q", a, where)
			}

			r = cmd(t, u, "show", "r2").ok(t)
			if strings.Contains(r.stdout, "\x1b") || !strings.Contains(r.stdout, `orders/0@7\x1b[31mred`) {
				t.Errorf("show r2: the receipt's escape sequence is not escaped:\n%q", r.stdout)
			}
			if a := decodeJSON[attempts](t, cmd(t, u, "show", "--json", "r2").ok(t).stdout).AttemptLog; len(a) != 1 || a[0]["receipt"] != hostile {
				t.Errorf("show --json r2: attempt log %v, want the receipt %q as it is", a, hostile)
			}
			r = cmd(t, u, "show", "r3").ok(t)
			if a := decodeJSON[attempts](t, cmd(t, u, "show", "--json", "r3").ok(t).stdout).AttemptLog; len(a) != 1 || a[0]["receipt"] != nil ||
				!strings.Contains(r.stdout, "published") {
				t.Errorf("show r3 (published without a receipt): %v\n%s", a, r.stdout)
			}
		})
	}
}

// relayWithReceipts emits r1, r2 and r3 and relays them with the attempt
// log: r1 fails once ("kaput"), then each is published with its receipt
// in receipts (r3 has none).
func relayWithReceipts(t *testing.T, db *gorm.DB, receipts map[string]string) {
	t.Helper()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{ID: "r1", Type: "receipted"}, outbox.Event{ID: "r2", Type: "receipted"},
			outbox.Event{ID: "r3", Type: "receipted"})
	}))
	pub := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
		if e.ID == "r1" && e.Attempt == 1 {
			return errors.New("kaput")
		}
		relay.SetReceipt(ctx, e, receipts[e.ID])
		return nil
	})
	r, err := relay.New(db, pub, relay.WithAttemptLog(), relay.WithBackoff(func(int) time.Duration { return 0 }),
		relay.WithLogger(slog.New(slog.DiscardHandler)))
	must(t, err)
	for range 2 {
		_, err := r.RunOnce(t.Context())
		must(t, err)
	}
}
