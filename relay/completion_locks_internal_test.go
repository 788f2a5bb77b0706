package relay

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// A completion locks only the rows it records: a claim of other events
// made while a completion of a full batch is not committed yet takes them
// at once. On MySQL, with statistics that know of the publishing rows,
// the completion read its rows by a scan of the whole primary key (or
// through an index that leads with status) and locked every row it read:
// the claim skipped them all, or waited for the completion's commit.
func TestCompletionLeavesClaimsFree(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
			t.Fatal(err)
		}
		pub := PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil })
		r, err := New(db, pub, WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		if !r.drv.concurrentWriters() {
			t.Skip("one writer at a time: a claim always waits for a completion")
		}
		const n = 1000
		if err := db.Transaction(func(tx *gorm.DB) error {
			for i := range 4 * n {
				if err := outbox.Emit(tx, outbox.Event{Type: "t", Payload: i}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		rows, err := r.drv.claim(t.Context(), db, "first", n, n, time.Minute)
		if err != nil || len(rows) != n {
			t.Fatalf("first claim: %d rows, %v", len(rows), err)
		}
		// Statistics that know of the publishing rows, as a busy relay's
		// own refreshes leave them (see maybeAnalyze).
		analyze := "ANALYZE outbox_events"
		if db.Dialector.Name() == "mysql" {
			analyze = "ANALYZE TABLE outbox_events"
		}
		if err := db.Exec(analyze).Error; err != nil {
			t.Fatal(err)
		}
		outs := make([]outcome, len(rows))
		for i := range rows {
			rows[i].LockedBy = ptr("first")
			outs[i] = outcome{row: &rows[i], kind: published}
		}
		r.cfg.workerID = "first"
		q, args := r.completion(outs, fenceMine)
		tx := db.Begin()
		defer tx.Rollback()
		if res := tx.Exec(q, args...); res.Error != nil || res.RowsAffected != n {
			t.Fatalf("completion: %d rows, %v", res.RowsAffected, res.Error)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		defer cancel()
		start := time.Now()
		got, err := r.drv.claim(ctx, db, "second", n, n, time.Minute)
		if err != nil || len(got) != n {
			t.Fatalf("a claim beside an uncommitted completion: %d rows after %v, %v (want %d at once)",
				len(got), time.Since(start).Round(time.Millisecond), err, n)
		}
	})
}

func ptr[T any](v T) *T { return &v }
