package outbox_test

import (
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"
)

func TestTrackDelete(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		a, b := &Purchase{Customer: "a", Amount: 1}, &Purchase{Customer: "b"}
		createPurchases(t, db, a, b)
		must(t, db.Delete(a).Error)                   // soft, row loaded
		must(t, db.Delete(&Purchase{ID: b.ID}).Error) // soft, only the key
		must(t, db.Delete(a).Error)                   // already soft-deleted: no row
		must(t, db.Unscoped().Delete(a).Error)        // hard
		evs := tracked(t, db)
		wantTypes(t, evs, fmt.Sprint("purchase.deleted ", a.ID), fmt.Sprint("purchase.deleted ", b.ID), fmt.Sprint("purchase.deleted ", a.ID))
		if !evs[0].Change.Soft || !evs[1].Change.Soft || evs[2].Change.Soft {
			t.Errorf("soft flags %v %v %v, want true true false", evs[0].Change.Soft, evs[1].Change.Soft, evs[2].Change.Soft)
		}
		if r := rowOf[Purchase](t, evs[0]); r.Customer != "a" || r.Amount != 1 {
			t.Errorf("row of a loaded delete %+v", r)
		}
		if len(evs[1].Change.Row) != 0 {
			t.Errorf("row of a key-only delete: %s, want none", evs[1].Change.Row)
		}
		if fmt.Sprint(evs[1].Change.Key["id"]) != fmt.Sprint(b.ID) {
			t.Errorf("key %v", evs[1].Change.Key)
		}
	})
}

// Deletes that do not name one row by the model's key read the rows first:
// one event per row, each with its row.
func TestTrackBulkDelete(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		a, b, c, d := &Purchase{Customer: "x"}, &Purchase{Customer: "x"}, &Purchase{Customer: "y"}, &Purchase{Customer: "z"}
		createPurchases(t, db, a, b, c, d)
		res := db.Where("customer = ?", "x").Delete(&Purchase{})
		must(t, res.Error)
		must(t, db.Delete(&Purchase{}, c.ID).Error)
		must(t, db.Unscoped().Delete(&[]Purchase{*a, *d}).Error)
		must(t, db.Where("customer = ?", "nobody").Delete(&Purchase{}).Error) // zero rows
		evs := tracked(t, db)
		wantTypes(t, evs,
			fmt.Sprint("purchase.deleted ", a.ID), fmt.Sprint("purchase.deleted ", b.ID),
			fmt.Sprint("purchase.deleted ", c.ID),
			fmt.Sprint("purchase.deleted ", a.ID), fmt.Sprint("purchase.deleted ", d.ID))
		for i, e := range evs {
			if want := i < 3; e.Change.Soft != want {
				t.Errorf("event %d: soft %v, want %v", i, e.Change.Soft, want)
			}
			if r := rowOf[Purchase](t, e); fmt.Sprint(r.ID) != e.AggregateID || r.Customer == "" {
				t.Errorf("event %d: row %+v", i, r)
			}
		}
		if n := count(t, db.Unscoped(), &Purchase{}); n != 2 {
			t.Errorf("%d purchases left, want 2 (b and c, soft-deleted)", n)
		}
	})
}

func TestTrackDeleteCompositeAndRollback(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Create(&[]LedgerEntry{{Book: "b", Entry: 1}, {Book: "b", Entry: 2}}).Error)
		clearOutbox(t, db)
		err := db.Transaction(func(tx *gorm.DB) error {
			must(t, tx.Where("book = ?", "b").Delete(&LedgerEntry{}).Error)
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatal(err)
		}
		wantTypes(t, tracked(t, db))
		must(t, db.Delete(&LedgerEntry{Book: "b", Entry: 2}).Error)
		wantTypes(t, tracked(t, db), "ledger_entry.deleted book=b,entry=2")
	})
}
