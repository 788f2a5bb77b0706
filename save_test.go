package outbox_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// Ticket has an application-chosen primary key, so db.Save of a new ticket
// runs GORM's update chain first (matching no row) and then an insert.
// Title is NOT NULL: a nil Title makes the insert fail.
type Ticket struct {
	ID    string  `gorm:"primaryKey;size:64"`
	Title *string `gorm:"not null"`
	outbox.Recorder
}

func (t *Ticket) AfterSave(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{Type: "ticket.saved", AggregateID: t.ID})
}

func ptr[T any](v T) *T { return &v }

// db.Save of a new row whose insert fails: the events of the save's hooks
// and Recorder commit with the row or not at all; a retry writes each once.
func TestSaveOfNewRowWhoseInsertFails(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Ticket{}))
		tk := Ticket{ID: "3f1b8c9e-new"}
		tk.Record(outbox.Event{Type: "ticket.opened", AggregateID: tk.ID})
		if err := db.Save(&tk).Error; err == nil {
			t.Fatal("saving a ticket without a title succeeded")
		}
		if n := count(t, db, &Ticket{}); n != 0 {
			t.Fatalf("%d tickets after a failed save", n)
		}
		if n := countEvents(t, db); n != 0 {
			t.Fatalf("%d events committed by a save whose row was not written", n)
		}
		if n := len(tk.RecordedEvents()); n != 1 {
			t.Fatalf("%d events recorded after the failed save, want 1", n)
		}

		tk.Title = ptr("fixed")
		must(t, db.Save(&tk).Error) // the retry
		assertEvents(t, db, "ticket.saved", 1)
		assertEvents(t, db, "ticket.opened", 1)
		if n := len(tk.RecordedEvents()); n != 0 {
			t.Fatalf("%d events recorded after the save committed, want 0", n)
		}

		must(t, db.Save(&tk).Error) // an update of the existing row
		assertEvents(t, db, "ticket.saved", 2)
		assertEvents(t, db, "ticket.opened", 1)
	})
}

// A successful db.Save of a new row with its primary key set writes its
// events once, in the transaction that inserts the row.
func TestSaveOfNewRowWritesEventsOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Ticket{}))
		tk := Ticket{ID: "new-1", Title: ptr("a")}
		tk.Record(outbox.Event{Type: "ticket.opened"})
		must(t, db.Save(&tk).Error)
		assertEvents(t, db, "ticket.saved", 1)
		assertEvents(t, db, "ticket.opened", 1)
		if n := count(t, db, &Ticket{}); n != 1 {
			t.Fatalf("%d tickets, want 1", n)
		}

		// Inside a transaction that rolls back: neither row nor events.
		_ = db.Transaction(func(tx *gorm.DB) error {
			rb := Ticket{ID: "new-2", Title: ptr("b")}
			if err := tx.Save(&rb).Error; err != nil {
				return err
			}
			return errRollback
		})
		assertEvents(t, db, "ticket.saved", 1)

		// An update that changes nothing (MySQL reports 0 rows and GORM
		// falls back to an upsert) still writes the save's event once.
		must(t, db.Save(&tk).Error)
		assertEvents(t, db, "ticket.saved", 2)
	})
}

// db.Select("*").Save(&m) of a row that does not exist updates nothing and
// GORM inserts nothing: the events its hooks emitted are not written, and
// nothing of them is left for a later save of the same value.
func TestSaveThatInsertsNothingLeavesNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Ticket{}))
		tk := Ticket{ID: "ghost", Title: ptr("x")}
		tk.Record(outbox.Event{Type: "ticket.opened"})
		must(t, db.Select("*").Save(&tk).Error)
		if n, e := count(t, db, &Ticket{}), countEvents(t, db); n != 0 || e != 0 {
			t.Fatalf("%d tickets and %d events after a save that matched nothing", n, e)
		}
		if n := len(tk.RecordedEvents()); n != 1 {
			t.Fatalf("%d events recorded, want 1: nothing was written", n)
		}
		must(t, db.Save(&tk).Error)
		assertEvents(t, db, "ticket.saved", 1)
		assertEvents(t, db, "ticket.opened", 1)
	})
}
