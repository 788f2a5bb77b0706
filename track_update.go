package outbox

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"
)

// trackBeforeUpdate builds the statement's conditions and assignments as
// gorm:update would, in its order, and for a statement that does not name
// one row by its key reads and locks the rows it will change and
// restricts it to them.
func (p *Plugin) trackBeforeUpdate(db *gorm.DB) {
	spec := p.tracking(db, ChangeUpdated)
	stmt := db.Statement
	if spec == nil || stmt.SQL.Len() > 0 {
		return
	}
	st := &trackState{stmt: stmt, spec: spec}
	// gorm:update first adds the schema's update clauses (the soft-delete
	// scope, which groups the conditions when one is an Or), then the
	// assignments, which add the model's key to the WHERE. It adds the
	// clauses again: they mark the statement and apply once
	// (soft_delete_enabled), as GORM's and its plugins' clauses do.
	for _, c := range stmt.Schema.UpdateClauses {
		stmt.AddClause(c)
	}
	if c, ok := stmt.Clauses["SET"]; ok {
		st.set, _ = c.Expression.(clause.Set)
	} else {
		if st.set = callbacks.ConvertToAssignments(stmt); len(st.set) == 0 {
			return // GORM updates nothing
		}
		stmt.AddClause(st.set)
		st.ownSet = true
	}
	stmt.Settings.Store(trackKey{}, st)
	where := whereOf(stmt)
	// The assignments put the key in the WHERE; it bounds the statement
	// unless GORM joins a condition with OR.
	if st.ownSet && singleRow(stmt) && !orJoined(where) && !spec.oldValues {
		return
	}
	if refusedUnbounded(db) {
		return // gorm:update refuses it: nothing to read
	}
	p.lockFirst(db, st, rowRead{conds: where, limited: true, lock: true})
}

// trackUpdated makes one updated event per row the UPDATE changed.
func (p *Plugin) trackUpdated(db *gorm.DB) {
	st := ownTrack(db.Statement)
	if st == nil {
		return
	}
	if st.ownSet {
		delete(db.Statement.Clauses, "SET")
	}
	if st.restricted {
		unrestrict(db.Statement)
	}
	// Rows read first all matched (they were locked): MySQL's count leaves
	// out those the UPDATE did not change, which PostgreSQL and SQLite
	// count, so the rows read decide, alike on every database. Except for
	// db.Save's update, which GORM follows with an upsert of the value
	// when it counts no row (MySQL: an unchanged row): that upsert reports
	// the row, once.
	if db.Error != nil || (db.RowsAffected == 0 && (!st.locked.IsValid() || st.locked.Len() == 0 || saveShaped(db.Statement))) {
		return
	}
	var changes []trackedChange
	if st.locked.IsValid() {
		after, err := p.written(db, st.spec, st.locked)
		if err != nil {
			p.failTracked(db, fmt.Errorf("outbox: Track(%s): reading the rows changed: %w", st.spec.name, err))
			return
		}
		changes = updatedRows(db, st, after)
	} else {
		changes = []trackedChange{updatedRow(db, st, db.Statement.ReflectValue)}
	}
	p.emitTracked(db, st.spec, changes)
}

// trackBeforeDelete reads and locks the rows a delete that does not name
// one row by its key will remove, and restricts it to them.
func (p *Plugin) trackBeforeDelete(db *gorm.DB) {
	spec := p.tracking(db, ChangeDeleted)
	stmt := db.Statement
	if spec == nil || stmt.SQL.Len() > 0 {
		return
	}
	st := &trackState{stmt: stmt, spec: spec}
	stmt.Settings.Store(trackKey{}, st)
	conds := deleteConds(stmt)
	if singleRow(stmt) && (stmt.Model == nil || stmt.Model == stmt.Dest) && !orJoined(conds) {
		return
	}
	if len(conds) == 0 && !db.AllowGlobalUpdate {
		return // gorm:delete refuses it: nothing to read
	}
	// Read with the model's scope: gorm:delete adds it (soft delete) to
	// the same conditions, in the same way.
	p.lockFirst(db, st, rowRead{conds: conds, scoped: true, limited: true, lock: true})
}

// trackDeleted makes one deleted event per row the DELETE (or the UPDATE
// of a soft delete) removed.
func (p *Plugin) trackDeleted(db *gorm.DB) {
	st := ownTrack(db.Statement)
	if st == nil {
		return
	}
	if st.restricted {
		unrestrict(db.Statement)
	}
	if db.Error != nil || db.RowsAffected == 0 {
		return
	}
	_, soft := db.Statement.Clauses["SET"] // added by GORM's soft delete
	var changes []trackedChange
	if st.locked.IsValid() {
		for i := range st.locked.Len() {
			changes = append(changes, trackedChange{Change: Change{Op: ChangeDeleted, Soft: soft}, row: st.locked.Index(i), loaded: true})
		}
	} else {
		row := reflect.Indirect(db.Statement.ReflectValue)
		changes = []trackedChange{{Change: Change{Op: ChangeDeleted, Soft: soft}, row: row, loaded: hasNonKeyValue(st.spec, db, row)}}
	}
	p.emitTracked(db, st.spec, changes)
}

// lockFirst reads and locks the rows r names, and restricts the statement
// to them.
func (p *Plugin) lockFirst(db *gorm.DB, st *trackState, r rowRead) {
	rows, err := p.readFirst(db, st.spec, r)
	if err != nil {
		_ = db.AddError(fmt.Errorf("outbox: Track(%s): reading the rows to change: %w", st.spec.name, err))
		return
	}
	st.locked = rows
	restrict(db.Statement, rows)
	st.restricted = true
}
