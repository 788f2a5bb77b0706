package outbox_test

import (
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

func TestTrackCreate(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		inv := Purchase{Customer: "ann", Status: "new", Amount: 10}
		must(t, db.Create(&inv).Error)
		evs := tracked(t, db)
		wantTypes(t, evs, fmt.Sprintf("purchase.created %d", inv.ID))
		e := evs[0]
		if e.AggregateType != "purchase" || e.PartitionKey != fmt.Sprintf("purchase:%d", inv.ID) {
			t.Errorf("aggregate %q, partition key %q", e.AggregateType, e.PartitionKey)
		}
		if e.Change.Op != "created" || fmt.Sprint(e.Change.Key["id"]) != fmt.Sprint(inv.ID) {
			t.Errorf("change %+v", e.Change)
		}
		if got := rowOf[Purchase](t, e); got.Customer != "ann" || got.Amount != 10 || got.ID != inv.ID {
			t.Errorf("row %+v", got)
		}
	})
}

func TestTrackCreateSliceAndBatches(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		invs := []Purchase{{Customer: "a"}, {Customer: "b"}, {Customer: "c"}}
		must(t, db.Create(&invs).Error)
		batch := make([]*Purchase, 5)
		for i := range batch {
			batch[i] = &Purchase{Customer: fmt.Sprint("batch", i)}
		}
		must(t, db.CreateInBatches(batch, 2).Error)
		evs := tracked(t, db)
		if len(evs) != 8 {
			t.Fatalf("%d events, want 8 (one per row): %q", len(evs), types(evs))
		}
		seen := map[string]bool{}
		for i, e := range evs {
			var id uint
			if i < 3 {
				id = invs[i].ID
			} else {
				id = batch[i-3].ID
			}
			if e.Type != "purchase.created" || e.AggregateID != fmt.Sprint(id) || seen[e.AggregateID] {
				t.Errorf("event %d: %s %s, want purchase.created %d once", i, e.Type, e.AggregateID, id)
			}
			seen[e.AggregateID] = true
		}
	})
}

func TestTrackCreateWithAssociations(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		inv := Purchase{Customer: "ann", Lines: []PurchaseLine{{SKU: "x", Qty: 1}, {SKU: "y", Qty: 2}}}
		must(t, db.Create(&inv).Error)
		evs := tracked(t, db)
		got := map[string]int{}
		for _, e := range evs {
			got[e.Type]++
		}
		if got["purchase.created"] != 1 || got["purchase_line.created"] != 2 || len(evs) != 3 {
			t.Fatalf("events %q, want one purchase.created and two purchase_line.created", types(evs))
		}
		for _, e := range evs {
			if e.Type == "purchase_line.created" {
				if l := rowOf[PurchaseLine](t, e); l.PurchaseID != inv.ID {
					t.Errorf("line %+v: PurchaseID, want %d", l, inv.ID)
				}
			}
		}
	})
}

func TestTrackCompositeKey(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Create(&LedgerEntry{Book: "a/b c", Entry: 7, Amount: 1}).Error)
		evs := tracked(t, db)
		wantTypes(t, evs, "ledger_entry.created book=a%2Fb+c,entry=7")
		if evs[0].PartitionKey != "ledger_entry:book=a%2Fb+c,entry=7" {
			t.Errorf("partition key %q", evs[0].PartitionKey)
		}
		if k := evs[0].Change.Key; k["book"] != "a/b c" || fmt.Sprint(k["entry"]) != "7" {
			t.Errorf("key %v", k)
		}
	})
}

func TestTrackUpsert(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Create(&LedgerEntry{Book: "b", Entry: 1, Amount: 1}).Error)
		clearOutbox(t, db)
		up := []LedgerEntry{{Book: "b", Entry: 1, Amount: 5}, {Book: "b", Entry: 2, Amount: 6}}
		must(t, db.Clauses(clause.OnConflict{UpdateAll: true}).Create(&up).Error)
		evs := tracked(t, db)
		// The row that existed was updated, the other inserted.
		wantTypes(t, evs, "ledger_entry.updated book=b,entry=1", "ledger_entry.created book=b,entry=2")
		for _, e := range evs {
			if !e.Change.Upsert {
				t.Errorf("%s: Upsert not set", e.AggregateID)
			}
		}
		if c := evs[0].Change.Columns; len(c) != 1 || c[0] != "amount" {
			t.Errorf("upsert's changed columns %q, want [amount]", c)
		}
		if r := rowOf[LedgerEntry](t, evs[0]); r.Amount != 5 {
			t.Errorf("row %+v", r)
		}
		clearOutbox(t, db)
		// DO NOTHING that inserts nothing: no row affected, no event.
		must(t, db.Clauses(clause.OnConflict{DoNothing: true}).Create(&LedgerEntry{Book: "b", Entry: 1}).Error)
		wantTypes(t, tracked(t, db))
		// DO NOTHING that inserts some rows: events for those only.
		some := []LedgerEntry{{Book: "b", Entry: 1}, {Book: "b", Entry: 3}}
		must(t, db.Clauses(clause.OnConflict{DoNothing: true}).Create(&some).Error)
		wantTypes(t, tracked(t, db), "ledger_entry.created book=b,entry=3")
	})
}

func TestTrackCreateRollback(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&Purchase{Customer: "gone"}).Error; err != nil {
				return err
			}
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatalf("Transaction: %v", err)
		}
		wantTypes(t, tracked(t, db))
		// A savepoint rolled back takes its events with it.
		must(t, db.Transaction(func(tx *gorm.DB) error {
			_ = tx.Transaction(func(tx2 *gorm.DB) error {
				must(t, tx2.Create(&Purchase{Customer: "inner"}).Error)
				return errRollback
			})
			return tx.Create(&Purchase{Customer: "outer"}).Error
		}))
		evs := tracked(t, db)
		if len(evs) != 1 || rowOf[Purchase](t, evs[0]).Customer != "outer" {
			t.Fatalf("events %q, want only the outer purchase's", types(evs))
		}
	})
}

func TestTrackSkipDefaultTransaction(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		s := db.Session(&gorm.Session{SkipDefaultTransaction: true})
		inv := Purchase{Customer: "a"}
		must(t, s.Create(&inv).Error)
		must(t, s.Model(&inv).Update("status", "paid").Error)
		must(t, s.Delete(&inv).Error)
		wantTypes(t, tracked(t, db), fmt.Sprint("purchase.created ", inv.ID), fmt.Sprint("purchase.updated ", inv.ID), fmt.Sprint("purchase.deleted ", inv.ID))
	})
}
