package outbox_test

import (
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// HookedNote is tracked and also emits from a hook of its own: both
// events are written, in the statement's transaction.
type HookedNote struct {
	ID   uint `gorm:"primaryKey"`
	Text string
}

func (n *HookedNote) AfterCreate(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{Type: "note.hooked", AggregateID: fmt.Sprint(n.ID)})
}

func TestTrackWithHooksAndDryRun(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&HookedNote{}))
		must(t, outbox.Track(db, &HookedNote{}))
		n := HookedNote{Text: "x"}
		must(t, db.Create(&n).Error)
		var got []string
		for _, e := range events(t, db) {
			got = append(got, e.Type)
		}
		if len(got) != 2 || got[0] != "note.hooked" && got[1] != "note.hooked" {
			t.Errorf("events %q, want hooked_note.created and note.hooked", got)
		}
		clearOutbox(t, db)
		dry := db.Session(&gorm.Session{DryRun: true})
		must(t, dry.Create(&Purchase{Customer: "dry"}).Error)
		must(t, dry.Model(&Purchase{}).Where("customer = ?", "x").Update("status", "y").Error)
		must(t, dry.Where("customer = ?", "x").Delete(&Purchase{}).Error)
		wantTypes(t, tracked(t, db))
	})
}

// Updates and deletes rolled back leave no event, bulk or not, with or
// without GORM's default transaction.
func TestTrackRollbackUpdateDelete(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		p := &Purchase{Customer: "a", Status: "new"}
		createPurchases(t, db, p)
		for _, tx := range []*gorm.DB{db, db.Session(&gorm.Session{SkipDefaultTransaction: true})} {
			err := tx.Transaction(func(tx *gorm.DB) error {
				must(t, tx.Model(p).Update("status", "x").Error)
				must(t, tx.Model(&Purchase{}).Where("customer = ?", "a").Update("amount", 9).Error)
				must(t, tx.Delete(p).Error)
				must(t, tx.Unscoped().Where("customer = ?", "a").Delete(&Purchase{}).Error)
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
		}
		wantTypes(t, tracked(t, db))
		if n := count(t, db, &Purchase{}, "status = ?", "new"); n != 1 {
			t.Errorf("%d purchases as created, want 1", n)
		}
		// Under SkipDefaultTransaction a bulk update is still one
		// transaction with its events.
		must(t, db.Session(&gorm.Session{SkipDefaultTransaction: true}).Model(&Purchase{}).Where("customer = ?", "a").Update("amount", 3).Error)
		wantTypes(t, tracked(t, db), fmt.Sprint("purchase.updated ", p.ID))
	})
}
