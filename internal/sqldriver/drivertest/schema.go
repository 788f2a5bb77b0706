package drivertest

import (
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseStatements(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	// InsertIgnore skips a duplicate without failing the transaction,
	// and, where InsertIgnoreCounted, counts it 0.
	t.Run("InsertIgnore", func(t *testing.T) {
		db := setup(t)
		q := "INSERT INTO " + IdemTable + " (idempotency_key, status, token, expires_at, created_at) VALUES (?, 'running', ?, ?, ?)" +
			drv.InsertIgnore("idempotency_key")
		now := drv.Time(timeNow())
		must(t, db.Transaction(func(tx *gorm.DB) error {
			first := tx.Exec(q, "k", "first", now, now)
			if first.Error != nil || first.RowsAffected != 1 {
				t.Fatalf("first insert: %v, %d rows, want 1", first.Error, first.RowsAffected)
			}
			second := tx.Exec(q, "k", "second", now, now)
			if second.Error != nil {
				t.Fatalf("duplicate insert failed: %v", second.Error)
			}
			if drv.InsertIgnoreCounted() && second.RowsAffected != 0 {
				t.Errorf("duplicate insert counted %d rows, want 0 (InsertIgnoreCounted)", second.RowsAffected)
			}
			// The transaction is still usable.
			return tx.Exec(q, "k2", "x", now, now).Error
		}))
		var tokens []string
		must(t, db.Raw("SELECT token FROM "+IdemTable+" ORDER BY idempotency_key").Scan(&tokens).Error)
		if len(tokens) != 2 || tokens[0] != "first" {
			t.Fatalf("tokens %v, want [first x]: the duplicate must leave the row alone", tokens)
		}
	})

	// Upsert inserts a new row and updates the listed columns of an
	// existing one.
	t.Run("Upsert", func(t *testing.T) {
		db := setup(t)
		q := "INSERT INTO " + IdemTable + " (idempotency_key, status, token, expires_at, created_at) VALUES (?, ?, ?, ?, ?)" +
			drv.Upsert("idempotency_key", "status", "token")
		now := drv.Time(timeNow())
		must(t, db.Exec(q, "k", "running", "a", now, now).Error)
		must(t, db.Exec(q, "k", "succeeded", "b", now, now).Error)
		var rows []struct{ Status, Token string }
		must(t, db.Raw("SELECT status, token FROM "+IdemTable).Scan(&rows).Error)
		if len(rows) != 1 || rows[0].Status != "succeeded" || rows[0].Token != "b" {
			t.Fatalf("rows %+v, want one updated to succeeded/b", rows)
		}
	})

	// LazyCommit is "" or a condition that is true, in a WHERE clause of
	// an UPDATE, of a SELECT and of a claim, inside and outside a
	// transaction, and changes nothing else.
	t.Run("LazyCommit", func(t *testing.T) { lazyCommitCase(t, drv, setup) })
	// IDList matches exactly the rows whose column holds one of the ids:
	// one id, several, and ids that match no row among them.
	t.Run("IDList", func(t *testing.T) { idListCase(t, drv, setup) })
}

// idListCase is exerciseStatements' IDList case, which also reaches the
// rows through ByID.
func idListCase(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	db := setup(t)
	for i := range 30 {
		insert(t, drv, db, false, event(fmt.Sprintf("e%02d", i), "", nil))
	}
	var all []int64
	must(t, db.Raw("SELECT id FROM "+Table+" ORDER BY id").Scan(&all).Error)
	for _, ids := range [][]int64{all[:1], {all[3], all[7], all[29]}, append(all[10:20:20], -1, 1<<40)} {
		cond, args := drv.IDList("id", ids)
		var got []int64
		must(t, db.Raw("SELECT id FROM "+drv.ByID(Table)+" WHERE "+cond+" ORDER BY id", args...).Scan(&got).Error)
		want := []int64{}
		for _, id := range ids {
			if id > 0 && id < 1<<40 {
				want = append(want, id)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("IDList(%v) matched %v, want %v", ids, got, want)
		}
		res := db.Exec("UPDATE "+drv.ByID(Table)+" SET attempts = attempts + 1 WHERE "+cond, args...)
		if res.Error != nil || res.RowsAffected != int64(len(want)) {
			t.Errorf("UPDATE … WHERE IDList(%v): %v, %d rows, want %d", ids, res.Error, res.RowsAffected, len(want))
		}
	}
}

func exerciseSchema(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	db := setup(t)
	t.Run("CheckConn", func(t *testing.T) {
		if err := drv.CheckConn(db); err != nil {
			t.Fatalf("CheckConn of the test connection: %v", err)
		}
	})
	// TableExists finds every table the migrations create, and only those.
	t.Run("TableExists", func(t *testing.T) {
		tables := drv.OutboxTables(Table)
		if len(tables) < 2 || tables[0] != Table || tables[1] != Table+"_relays" {
			t.Fatalf("OutboxTables(%q) = %v, want the table, its _relays table, …", Table, tables)
		}
		for _, tb := range append(tables, IdemTable) {
			if ok, err := drv.TableExists(db, tb); err != nil || !ok {
				t.Errorf("TableExists(%q) = %v, %v; want true", tb, ok, err)
			}
		}
		if ok, err := drv.TableExists(db, "no_such_table"); err != nil || ok {
			t.Errorf("TableExists(no_such_table) = %v, %v; want false", ok, err)
		}
	})
	// A mixed-case name, as the library's SQL writes it (unquoted), is
	// found by TableExists and reached through GORM with GormTable.
	t.Run("MixedCase", func(t *testing.T) {
		must(t, db.Exec("CREATE TABLE MixedCase_T (id INTEGER NOT NULL PRIMARY KEY)").Error)
		must(t, db.Exec("INSERT INTO MixedCase_T (id) VALUES (1)").Error)
		if ok, err := drv.TableExists(db, "MixedCase_T"); err != nil || !ok {
			t.Errorf("TableExists(MixedCase_T) = %v, %v; want true", ok, err)
		}
		var n int64
		must(t, db.Table(drv.GormTable("MixedCase_T")).Count(&n).Error)
		if n != 1 {
			t.Errorf("%d rows through GormTable, want 1", n)
		}
	})
	t.Run("EstimatedRows", func(t *testing.T) { estimatedRowsCase(t, drv, db) })
	// MissingTable tells the error of an INSERT into a table that does
	// not exist from other failures of the same statement.
	t.Run("MissingTable", func(t *testing.T) {
		_, err := drv.InsertEvents(db, sqldriver.InsertEventsParams{Table: "no_such_table", Rows: []sqldriver.EventRow{event("m1", "", nil)}, Now: timeNow()})
		if err == nil || !drv.MissingTable(err) || !drv.MissingTable(fmt.Errorf("wrapped: %w", err)) {
			t.Errorf("MissingTable(%v) is false, want true (wrapped too)", err)
		}
		insert(t, drv, db, false, event("m2", "", nil))
		_, err = drv.InsertEvents(db, sqldriver.InsertEventsParams{Table: Table, Rows: []sqldriver.EventRow{event("m2", "", nil)}, Now: timeNow()})
		if err == nil || drv.MissingTable(err) {
			t.Errorf("a duplicate event id: MissingTable(%v) is true, want an error that is not a missing table", err)
		}
		if drv.MissingTable(nil) {
			t.Errorf("MissingTable(nil) is true")
		}
	})
}

// estimatedRowsCase is exerciseSchema's EstimatedRows case: where ok, the
// estimate is near the table's row count once the database analyzed it;
// where not ok it is zero.
func estimatedRowsCase(t *testing.T, drv sqldriver.Driver, db *gorm.DB) {
	rows := make([]sqldriver.EventRow, 300)
	for i := range rows {
		rows[i] = event(fmt.Sprintf("est-%d", i), "", nil)
	}
	insert(t, drv, db, false, rows...)
	analyze := map[string]string{"postgres": "ANALYZE " + Table, "mysql": "ANALYZE TABLE " + Table, "sqlite": "ANALYZE"}[drv.Name()]
	if analyze != "" {
		must(t, db.Exec(analyze).Error)
	}
	n, ok, err := drv.EstimatedRows(db, Table)
	must(t, err)
	if ok && (n < 150 || n > 600) {
		t.Errorf("EstimatedRows = %d after analyzing 300 rows, want about 300", n)
	}
	if !ok && n != 0 {
		t.Errorf("EstimatedRows = %d, not ok; want 0", n)
	}
	if drv.Name() == "postgres" && !ok {
		t.Errorf("EstimatedRows not ok on PostgreSQL after ANALYZE")
	}
}

// lazyCommitCase is exerciseStatements' LazyCommit case.
func lazyCommitCase(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	db := setup(t)
	cond := drv.LazyCommit()
	if cond == "" {
		t.Skip("the dialect commits every transaction alike")
	}
	insert(t, drv, db, false, event("a", "", nil))
	var n int
	must(t, db.Raw("SELECT COUNT(*) FROM "+Table+" WHERE "+cond).Scan(&n).Error)
	res := db.Exec("UPDATE " + Table + " SET attempts = attempts + 1 WHERE event_id = 'a' AND " + cond)
	if n != 1 || res.Error != nil || res.RowsAffected != 1 {
		t.Fatalf("SELECT counted %d rows, UPDATE %d rows (%v); want 1 and 1", n, res.RowsAffected, res.Error)
	}
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return tx.Exec("UPDATE " + Table + " SET attempts = attempts + 1 WHERE event_id = 'a' AND " + cond).Error
	}))
	got, err := drv.Claim(t.Context(), db, sqldriver.ClaimParams{Table: Table, Worker: "w", Limit: 10, Lease: time.Minute, LazyCommit: true})
	must(t, err)
	if len(got) != 1 || got[0].Attempts != 3 {
		t.Fatalf("lazy claim returned %+v, want event a with 3 attempts", got)
	}
}
