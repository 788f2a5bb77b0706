package drivertest

import (
	"slices"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseAttemptLog(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	s := suite{drv: drv, setup: setup}
	t.Run("CompleteLogsAppliedRowsOnly", func(t *testing.T) { s.attemptCompleteFenced(t, false) })
	t.Run("CompleteBumpingVersion", func(t *testing.T) { s.attemptCompleteFenced(t, true) })
	t.Run("CompleteAfterLostAnswer", s.attemptCompleteAgain)
	t.Run("InsertSkipsLoggedClaim", s.attemptInsertOnce)
	t.Run("DeletePublishedDeletesRecords", s.attemptRetention)
}

// attemptRow is a record as the suite reads it back.
type attemptRow struct {
	EventRowID   int64
	EventID      string
	RelayID      string
	Attempt      int
	ClaimVersion int64
	Outcome      string
	DurationUs   int64
	Error        *string
	Receipt      *string
}

func attemptRows(t *testing.T, db *gorm.DB) []attemptRow {
	t.Helper()
	var rows []attemptRow
	must(t, db.Raw("SELECT event_row_id, event_id, relay_id, attempt, claim_version, outcome, duration_us, error, receipt FROM "+
		sqldriver.AttemptsTable(Table)+" ORDER BY event_row_id, claim_version").Scan(&rows).Error)
	return rows
}

// attemptRecord returns the record of claimed row c with outcome, as
// published; the record of event "a" has a receipt, the others none.
func attemptRecord(c sqldriver.ClaimedEvent, outcome string) sqldriver.AttemptRecord {
	msg := "boom " + c.EventID
	rec := sqldriver.AttemptRecord{EventRowID: c.ID, EventID: c.EventID, RelayID: "w", Attempt: c.Attempts,
		ClaimVersion: c.ClaimVersion, Outcome: outcome, Duration: 1500 * time.Microsecond, Error: &msg,
		StatusAfter: "published", VersionAfter: c.ClaimVersion}
	if c.EventID == "a" {
		receipt := "orders/2@" + c.EventID
		rec.Receipt = &receipt
	}
	return rec
}

// receiptOK reports whether g has the receipt attemptRecord gave it.
func receiptOK(g attemptRow) bool {
	if g.EventID == "a" {
		return g.Receipt != nil && *g.Receipt == "orders/2@a"
	}
	return g.Receipt == nil
}

// publishUpdate is a fenced completion of rows as published, each under
// the claim_version given; bump also bumps claim_version (as a rescue
// does).
func publishUpdate(rows []sqldriver.ClaimedEvent, versions []int64, bump ...bool) (string, []any) {
	q := "UPDATE " + Table + " SET status = 'published', locked_by = NULL, locked_until = NULL"
	if len(bump) > 0 && bump[0] {
		q += ", claim_version = claim_version + 1"
	}
	q += " WHERE status = 'publishing' AND ("
	var args []any
	for i := range rows {
		if i > 0 {
			q += " OR "
		}
		q += "(id = ? AND claim_version = ?)"
		args = append(args, rows[i].ID, versions[i])
	}
	return q + ")", args
}

func sortedIDs(ids []int64) []int64 { slices.Sort(ids); return ids }

// Complete runs the update and logs exactly the rows it changed: a row
// the update's fence refuses (a stale claim_version) gets no record, and
// Complete does not report it; also when the update bumps claim_version
// (the records' VersionAfter).
func (s suite) attemptCompleteFenced(t *testing.T, bump bool) {
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a", "", nil), event("b", "", nil), event("stale", "", nil))
	rows := s.claim(t, db, 10, "")
	if len(rows) != 3 {
		t.Fatalf("claimed %d rows, want 3", len(rows))
	}
	versions := make([]int64, len(rows))
	recs := make([]sqldriver.AttemptRecord, len(rows))
	var want []int64
	for i, r := range rows {
		versions[i] = r.ClaimVersion
		if r.EventID == "stale" {
			versions[i]-- // the relay's claim was taken over since
		} else {
			want = append(want, r.ID)
		}
		recs[i] = attemptRecord(r, "published")
		if bump {
			recs[i].VersionAfter++
		}
	}
	q, args := publishUpdate(rows, versions, bump)
	ids, err := s.drv.Complete(db, sqldriver.CompleteParams{Table: Table, Update: q, Args: args, Records: recs})
	must(t, err)
	if got := sortedIDs(ids); !slices.Equal(got, sortedIDs(want)) {
		t.Fatalf("Complete returned %v, want %v (not the stale row)", got, want)
	}
	got := attemptRows(t, db)
	if len(got) != 2 {
		t.Fatalf("%d records %+v, want 2: none for the stale claim", len(got), got)
	}
	for _, g := range got {
		if g.EventID == "stale" || g.Outcome != "published" || g.RelayID != "w" || g.Attempt != 1 || g.ClaimVersion != 1 ||
			g.DurationUs != 1500 || g.Error == nil || *g.Error != "boom "+g.EventID || !receiptOK(g) {
			t.Errorf("record %+v, want published by w, attempt 1, claim 1, 1500 µs, its error and receipt", g)
		}
	}
	if n := count(t, db, Table, "status = 'publishing'"); n != 1 {
		t.Fatalf("%d rows still publishing, want 1 (the stale one)", n)
	}
}

// A second try of the same completion (the answer of the first was lost)
// reports no row the fence refuses and writes no second record.
func (s suite) attemptCompleteAgain(t *testing.T) {
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a", "", nil), event("b", "", nil))
	rows := s.claim(t, db, 10, "")
	recs := []sqldriver.AttemptRecord{attemptRecord(rows[0], "published"), attemptRecord(rows[1], "published")}
	q, args := publishUpdate(rows, []int64{rows[0].ClaimVersion, rows[1].ClaimVersion})
	_, err := s.drv.Complete(db, sqldriver.CompleteParams{Table: Table, Update: q, Args: args, Records: recs})
	must(t, err)
	ids, err := s.drv.Complete(db, sqldriver.CompleteParams{Table: Table, Update: q, Args: args, Records: recs})
	must(t, err)
	if s.drv.Returning() && len(ids) != 0 {
		t.Errorf("second Complete returned %v; the update changed nothing", ids)
	}
	if n := len(attemptRows(t, db)); n != 2 {
		t.Fatalf("%d records after two tries, want 2", n)
	}
}

// InsertAttempts skips a record of a claim already logged, and logs the
// next claim of the same event.
func (s suite) attemptInsertOnce(t *testing.T) {
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a", "", nil))
	c := s.claim(t, db, 1, "")[0]
	rec := attemptRecord(c, "retried")
	must(t, db.Transaction(func(tx *gorm.DB) error { return s.drv.InsertAttempts(tx, Table, []sqldriver.AttemptRecord{rec}) }))
	must(t, db.Transaction(func(tx *gorm.DB) error { return s.drv.InsertAttempts(tx, Table, []sqldriver.AttemptRecord{rec}) }))
	rec.ClaimVersion, rec.Attempt, rec.Outcome, rec.Error = rec.ClaimVersion+1, 2, "published", nil
	must(t, db.Transaction(func(tx *gorm.DB) error { return s.drv.InsertAttempts(tx, Table, []sqldriver.AttemptRecord{rec}) }))
	got := attemptRows(t, db)
	if len(got) != 2 || got[0].Outcome != "retried" || got[1].Outcome != "published" || got[1].Error != nil || !receiptOK(got[1]) {
		t.Fatalf("records %+v, want retried (once) then published, with its receipt", got)
	}
}

// DeletePublished with Attempts deletes the records of the events it
// deletes and keeps the others'.
func (s suite) attemptRetention(t *testing.T) {
	db := s.setup(t)
	insert(t, s.drv, db, false, event("old", "", nil), event("kept", "", nil))
	rows := s.claim(t, db, 10, "")
	recs := make([]sqldriver.AttemptRecord, len(rows))
	for i := range rows {
		recs[i] = attemptRecord(rows[i], "published")
	}
	must(t, db.Transaction(func(tx *gorm.DB) error { return s.drv.InsertAttempts(tx, Table, recs) }))
	old, oa := s.drv.NowPlus(-2 * time.Hour)
	must(t, db.Exec("UPDATE "+Table+" SET status = 'published', published_at = "+old+" WHERE event_id = 'old'", oa...).Error)
	_, n, err := s.drv.DeletePublished(t.Context(), db, sqldriver.DeletePublishedParams{Table: Table, OlderThan: time.Hour,
		Limit: 10, Attempts: sqldriver.AttemptsTable(Table)})
	must(t, err)
	got := attemptRows(t, db)
	if n != 1 || len(got) != 1 || got[0].EventID != "kept" {
		t.Fatalf("deleted %d events, records left %+v; want 1 deleted and kept's record left", n, got)
	}
}
