package outbox_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

func TestRecorderWritesOnEveryKindOfSave(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		acc := Account{Owner: "ada"}
		acc.Record(outbox.Event{Type: "account.opened"})
		must(t, db.Create(&acc).Error) // create through a pointer
		assertEvents(t, db, "account.opened", 1)
		if n := len(acc.RecordedEvents()); n != 0 {
			t.Fatalf("%d events still recorded after a successful create", n)
		}

		acc.Deposit(10)
		must(t, db.Save(&acc).Error) // save
		assertEvents(t, db, "account.deposited", 1)

		must(t, db.Save(&acc).Error) // a second save writes nothing more
		assertEvents(t, db, "account.deposited", 1)

		acc.Deposit(5)
		must(t, db.Model(&acc).Updates(map[string]any{"balance": acc.Balance}).Error) // Model(&x).Updates
		assertEvents(t, db, "account.deposited", 2)

		acc.Deposit(1)
		must(t, db.Model(&acc).Update("balance", acc.Balance).Error) // Model(&x).Update
		assertEvents(t, db, "account.deposited", 3)

		acc.Record(outbox.Event{Type: "account.closed"})
		must(t, db.Delete(&acc).Error) // delete
		assertEvents(t, db, "account.closed", 1)
	})
}

func TestRecorderSlices(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		values := make([]Account, 7)
		for i := range values {
			values[i].Record(outbox.Event{Type: "values"})
		}
		must(t, db.CreateInBatches(values, 3).Error)
		assertEvents(t, db, "values", 7)

		ptrs := make([]*Account, 5)
		for i := range ptrs {
			ptrs[i] = &Account{}
			ptrs[i].Record(outbox.Event{Type: "pointers"}, outbox.Event{Type: "pointers"})
		}
		must(t, db.CreateInBatches(&ptrs, 2).Error)
		assertEvents(t, db, "pointers", 10)

		// CreateInBatches of more than one batch runs in a transaction of
		// its own that the statements cannot see commit: the events stay
		// recorded, with the ids they were written under.
		for _, v := range values {
			if ev := v.RecordedEvents(); len(ev) != 1 || ev[0].ID == "" {
				t.Fatalf("recorded events after CreateInBatches: %+v, want one with its ID", ev)
			}
		}
		// Saving the slice (one upsert in its own transaction) writes them
		// again as no-ops and clears them.
		must(t, db.Save(&values).Error)
		must(t, db.Save(&ptrs).Error)
		assertEvents(t, db, "values", 7)
		assertEvents(t, db, "pointers", 10)
		for _, v := range values {
			if len(v.RecordedEvents()) != 0 {
				t.Fatal("events left recorded on a slice element")
			}
		}
		for _, p := range ptrs {
			if len(p.RecordedEvents()) != 0 {
				t.Fatal("events left recorded on a slice element")
			}
		}
	})
}

func TestRecorderKeepsEventsWhenSaveFails(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		acc := Account{Owner: "x"}
		must(t, db.Create(&acc).Error)

		dup := Account{ID: acc.ID} // primary key conflict
		dup.Record(outbox.Event{Type: "dup"})
		if err := db.Create(&dup).Error; err == nil {
			t.Fatal("creating a duplicate primary key succeeded")
		}
		if len(dup.RecordedEvents()) != 1 {
			t.Fatal("a failed create cleared the recorded events")
		}
		assertEvents(t, db, "dup", 0)

		// An invalid event fails the save and nothing is written.
		bad := Account{Owner: "bad"}
		bad.Record(outbox.Event{Type: "ok"}, outbox.Event{})
		if err := db.Create(&bad).Error; !errors.Is(err, outbox.ErrInvalidEvent) {
			t.Fatalf("err = %v, want ErrInvalidEvent", err)
		}
		if n := count(t, db, &Account{}, "owner = ?", "bad"); n != 0 {
			t.Fatalf("the aggregate was written although its event was invalid")
		}
		assertEvents(t, db, "ok", 0)
		if len(bad.RecordedEvents()) != 2 {
			t.Fatal("a failed create cleared the recorded events")
		}

		// Retrying after fixing it writes each event once.
		dup.ID = 0
		must(t, db.Create(&dup).Error)
		assertEvents(t, db, "dup", 1)
	})
}

func TestRecorderEventsRecordedInHooks(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		w := Wallet{Owner: "h"}
		must(t, db.Create(&w).Error)
		assertEvents(t, db, "wallet.created", 1)
	})
}

// Wallet records an event in its BeforeCreate hook.
type Wallet struct {
	ID    uint
	Owner string
	outbox.Recorder
}

func (w *Wallet) BeforeCreate(*gorm.DB) error {
	w.Record(outbox.Event{Type: "wallet.created"})
	return nil
}

func TestRecorderAndEmitInOneStatement(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Wallet{}))
		must(t, db.Transaction(func(tx *gorm.DB) error {
			acc := Account{Owner: "both"}
			acc.Record(outbox.Event{Type: "recorded"})
			if err := tx.Create(&acc).Error; err != nil {
				return err
			}
			return outbox.Emit(tx, outbox.Event{Type: "emitted"})
		}))
		assertEvents(t, db, "recorded", 1)
		assertEvents(t, db, "emitted", 1)
	})
}

func assertEvents(t *testing.T, db *gorm.DB, typ string, want int64) {
	t.Helper()
	if n := countEvents(t, db, "type = ?", typ); n != want {
		t.Fatalf("%d %q events, want %d", n, typ, want)
	}
}

// Member has a unique email, so that one of a batch can fail.
type Member struct {
	ID    uint
	Email string `gorm:"size:100;uniqueIndex"`
	outbox.Recorder
}

// A CreateInBatches that fails in its second batch rolls back the first
// batch's events too; retrying the same slice writes every event once.
func TestRecorderRetriedCreateInBatches(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Member{}))
		must(t, db.Create(&Member{Email: "taken"}).Error)
		three := []Member{{Email: "a"}, {Email: "b"}, {Email: "taken"}}
		for i := range three {
			three[i].Record(outbox.Event{Type: "member.joined", AggregateID: three[i].Email})
		}
		if err := db.CreateInBatches(&three, 2).Error; err == nil {
			t.Fatal("CreateInBatches with a duplicate email succeeded")
		}
		assertEvents(t, db, "member.joined", 0)

		three[2].Email = "c"
		must(t, db.CreateInBatches(&three, 2).Error)
		assertEvents(t, db, "member.joined", 3)
		if n := count(t, db, &Member{}); n != 4 {
			t.Fatalf("%d members, want 4", n)
		}

		// The events were written inside CreateInBatches' own transaction:
		// a later save of the aggregates writes them again as no-ops.
		for i := range three {
			must(t, db.Save(&three[i]).Error)
			if n := len(three[i].RecordedEvents()); n != 0 {
				t.Fatalf("member %d: %d events still recorded after a committed save", i, n)
			}
		}
		assertEvents(t, db, "member.joined", 3)
	})
}

// A db.Transaction whose function fails after the aggregate's save rolls
// the events back; the retried transaction writes them.
func TestRecorderRetriedTransaction(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		acc := Account{Owner: "retry"}
		acc.Deposit(5)
		attempt := 0
		run := func() error {
			return db.Transaction(func(tx *gorm.DB) error {
				attempt++
				if err := tx.Create(&acc).Error; err != nil {
					return err
				}
				if attempt == 1 {
					return errRollback // as a deadlock would, after the statement succeeded
				}
				return nil
			})
		}
		if err := run(); err == nil {
			t.Fatal("the first attempt did not fail")
		}
		assertEvents(t, db, "account.deposited", 0)
		must(t, run())
		assertEvents(t, db, "account.deposited", 1)
		if n := count(t, db, &Account{}); n != 1 {
			t.Fatalf("%d accounts, want 1", n)
		}

		// Still shown: the save ran inside a transaction it did not commit.
		if n := len(acc.RecordedEvents()); n != 1 {
			t.Fatalf("%d events recorded after a save inside db.Transaction, want 1 (not known to be committed)", n)
		}
		if acc.RecordedEvents()[0].ID == "" {
			t.Fatal("a written event shows no ID")
		}
		must(t, db.Save(&acc).Error) // writes it again: a no-op
		assertEvents(t, db, "account.deposited", 1)
		if n := len(acc.RecordedEvents()); n != 0 {
			t.Fatalf("%d events recorded after a save in its own transaction, want 0", n)
		}
	})
}
