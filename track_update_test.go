package outbox_test

import (
	"fmt"
	"slices"
	"testing"

	"gorm.io/gorm"
)

func createPurchases(t *testing.T, db *gorm.DB, ps ...*Purchase) {
	t.Helper()
	for _, p := range ps {
		must(t, db.Create(p).Error)
	}
	clearOutbox(t, db)
}

func wantColumns(t *testing.T, e trackedEvent, want ...string) {
	t.Helper()
	got := slices.Clone(e.Change.Columns)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("%s %s: changed %q, want %q", e.Type, e.AggregateID, got, want)
	}
}

func TestTrackUpdatePaths(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		p := &Purchase{Customer: "ann", Status: "new", Amount: 1}
		createPurchases(t, db, p)
		id := fmt.Sprint(p.ID)

		must(t, db.Model(p).Updates(Purchase{Status: "open", Amount: 2}).Error)
		must(t, db.Model(p).Updates(map[string]any{"status": "paid"}).Error)
		must(t, db.Model(p).Update("amount", 3).Error)
		must(t, db.Model(p).UpdateColumn("customer", "bob").Error)
		must(t, db.Model(p).UpdateColumns(map[string]any{"amount": 4, "status": "shipped"}).Error)
		p.Customer = "cid"
		must(t, db.Save(p).Error)
		evs := tracked(t, db)
		u := "purchase.updated " + id
		wantTypes(t, evs, u, u, u, u, u, u)
		wantColumns(t, evs[0], "status", "amount", "updated_at")
		wantColumns(t, evs[1], "status", "updated_at")
		wantColumns(t, evs[2], "amount", "updated_at")
		wantColumns(t, evs[3], "customer") // UpdateColumn: no updated_at
		wantColumns(t, evs[4], "amount", "status")
		wantColumns(t, evs[5], "customer", "status", "amount", "updated_at", "deleted_at")
		if evs[1].Change.New["status"] != "paid" || fmt.Sprint(evs[2].Change.New["amount"]) != "3" {
			t.Errorf("new values %v, %v", evs[1].Change.New, evs[2].Change.New)
		}
		if r := rowOf[Purchase](t, evs[5]); r.Customer != "cid" || r.Status != "shipped" || r.Amount != 4 {
			t.Errorf("row of Save %+v", r)
		}
		for _, e := range evs {
			if e.PartitionKey != "purchase:"+id {
				t.Errorf("partition key %q", e.PartitionKey)
			}
		}
	})
}

// Save of a value whose key is set but matches no row inserts it: one
// created event, no updated one.
func TestTrackSaveInsert(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Save(&Purchase{ID: 42, Customer: "new"}).Error)
		must(t, db.Save(&Purchase{Customer: "auto"}).Error)
		evs := tracked(t, db)
		if len(evs) != 2 || evs[0].Type != "purchase.created" || evs[0].AggregateID != "42" || evs[1].Type != "purchase.created" {
			t.Fatalf("events %q, want purchase.created 42 and one more purchase.created", types(evs))
		}
	})
}

// A bulk update (no key in the model) writes one event per affected row,
// with the old and new values of the changed columns.
func TestTrackBulkUpdate(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		a, b, c := &Purchase{Customer: "a", Status: "new"}, &Purchase{Customer: "b", Status: "new"}, &Purchase{Customer: "c", Status: "paid"}
		createPurchases(t, db, a, b, c)
		res := db.Model(&Purchase{}).Where("status = ?", "new").Updates(map[string]any{"status": "open", "amount": gorm.Expr("amount + 5")})
		must(t, res.Error)
		if res.RowsAffected != 2 {
			t.Fatalf("RowsAffected %d, want 2", res.RowsAffected)
		}
		evs := tracked(t, db)
		wantTypes(t, evs, fmt.Sprint("purchase.updated ", a.ID), fmt.Sprint("purchase.updated ", b.ID))
		for _, e := range evs {
			wantColumns(t, e, "status", "amount", "updated_at")
			if e.Change.Old["status"] != "new" || e.Change.New["status"] != "open" ||
				fmt.Sprint(e.Change.Old["amount"]) != "0" || fmt.Sprint(e.Change.New["amount"]) != "5" {
				t.Errorf("old %v new %v", e.Change.Old, e.Change.New)
			}
			if r := rowOf[Purchase](t, e); r.Status != "open" || r.Amount != 5 {
				t.Errorf("row %+v, want it as stored after the update", r)
			}
		}
		clearOutbox(t, db)
		// Zero rows affected: no event.
		must(t, db.Model(&Purchase{}).Where("status = ?", "none").Update("amount", 1).Error)
		must(t, db.Model(&Purchase{ID: 9999}).Update("amount", 1).Error)
		wantTypes(t, tracked(t, db))
		// A soft-deleted row is out of an update's scope.
		must(t, db.Delete(c).Error)
		clearOutbox(t, db)
		must(t, db.Model(&Purchase{}).Where("customer IN ?", []string{"b", "c"}).Update("status", "x").Error)
		wantTypes(t, tracked(t, db), fmt.Sprint("purchase.updated ", b.ID))
	})
}

func TestTrackOldValues(t *testing.T) {
	testTrack := func(t *testing.T, db *gorm.DB) {
		p := &Purchase{Customer: "a", Status: "new"}
		createPurchases(t, db, p)
		must(t, db.Model(p).Update("status", "paid").Error)
		evs := tracked(t, db)
		wantTypes(t, evs, fmt.Sprint("purchase.updated ", p.ID))
		if evs[0].Change.Old["status"] != "new" || evs[0].Change.New["status"] != "paid" {
			t.Errorf("old %v new %v", evs[0].Change.Old, evs[0].Change.New)
		}
	}
	eachTracked(t, testTrack, outboxTrackOldValues())
}

// Save of an unchanged row: PostgreSQL and SQLite count the row as
// updated; MySQL reports no affected row, and GORM then runs an upsert of
// the row, which Track reports as an update (Upsert set) since the row
// existed: one updated event everywhere.
func TestTrackSaveUnchanged(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		p := &Purchase{Customer: "a"}
		createPurchases(t, db, p)
		must(t, db.Omit("updated_at").Save(p).Error)
		evs := tracked(t, db)
		wantTypes(t, evs, fmt.Sprint("purchase.updated ", p.ID))
		if up := evs[0].Change.Upsert; up != (db.Dialector.Name() == "mysql") {
			t.Errorf("Upsert %v", up)
		}
	})
}

// Associations saved with a parent's update are tracked as their own
// creates and updates.
func TestTrackUpdateWithAssociations(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		p := &Purchase{Customer: "a", Lines: []PurchaseLine{{SKU: "x", Qty: 1}}}
		createPurchases(t, db, p)
		p.Status = "open"
		p.Lines = append(p.Lines, PurchaseLine{SKU: "y", Qty: 2})
		must(t, db.Save(p).Error)
		evs := tracked(t, db)
		// GORM upserts the lines (updating their purchase_id): the existing
		// one is reported updated, the new one created.
		wantTypes(t, evs, fmt.Sprint("purchase_line.updated ", p.Lines[0].ID), fmt.Sprint("purchase_line.created ", p.Lines[1].ID),
			fmt.Sprint("purchase.updated ", p.ID))

		clearOutbox(t, db)
		p.Lines[0].Qty = 5
		must(t, db.Session(&gorm.Session{FullSaveAssociations: true}).Save(p).Error)
		evs = tracked(t, db)
		got := map[string]bool{}
		for _, e := range evs {
			got[e.Type+" "+e.AggregateID] = true
		}
		if !got[fmt.Sprint("purchase_line.updated ", p.Lines[0].ID)] || !got[fmt.Sprint("purchase.updated ", p.ID)] {
			t.Errorf("events %q: want the line's update (an upsert) and the purchase's", types(evs))
		}
	})
}

// A bulk update that changes no value of the rows it matches writes their
// events on every database (MySQL reports 0 affected rows).
func TestTrackBulkUpdateUnchanged(t *testing.T) {
	eachTracked(t, func(t *testing.T, db *gorm.DB) {
		a := &Purchase{Customer: "a", Status: "same"}
		createPurchases(t, db, a)
		must(t, db.Model(&Purchase{}).Where("customer = ?", "a").UpdateColumn("status", "same").Error)
		wantTypes(t, tracked(t, db), fmt.Sprint("purchase.updated ", a.ID))
	})
}
