package outbox

import (
	"errors"
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"
)

// trackState is what a tracked update or delete statement noted before it
// ran, for the callback that makes its events after it.
type trackState struct {
	stmt   *gorm.Statement
	spec   *trackSpec
	set    clause.Set    // update: the assignments
	ownSet bool          // the SET clause was added here (GORM removes its own)
	locked reflect.Value // []T read and locked first; invalid: a single row by key
	// existed: create with ON CONFLICT DO NOTHING, the keys that existed.
	existed   map[string]bool
	doNothing bool
}

type trackKey struct{}

// ownTrack returns, and forgets, the state noted for this very statement.
func ownTrack(stmt *gorm.Statement) *trackState {
	v, ok := stmt.Settings.Load(trackKey{})
	if !ok {
		return nil
	}
	st := v.(*trackState)
	if st.stmt != stmt {
		return nil
	}
	stmt.Settings.Delete(trackKey{})
	return st
}

func (p *Plugin) registerTrackCallbacks(db *gorm.DB) error {
	c := db.Callback()
	return errors.Join(
		c.Create().After("gorm:save_before_associations").Before("gorm:create").Register("outbox:track_before_create", p.trackBeforeCreate),
		c.Create().After("gorm:create").Before("gorm:after_create").Register("outbox:track_create", p.trackCreated),
		c.Update().After("gorm:save_before_associations").Before("gorm:update").Register("outbox:track_before_update", p.trackBeforeUpdate),
		c.Update().After("gorm:update").Before("gorm:after_update").Register("outbox:track_update", p.trackUpdated),
		c.Delete().After("gorm:delete_before_associations").Before("gorm:delete").Register("outbox:track_before_delete", p.trackBeforeDelete),
		c.Delete().After("gorm:delete").Before("gorm:after_delete").Register("outbox:track_delete", p.trackDeleted),
		c.Raw().Before("gorm:raw").Register("outbox:track_raw", p.trackRaw),
		c.Row().Before("gorm:row").Register("outbox:track_raw", p.trackRaw),
	)
}

// tracking returns the spec of a statement that may write op's events.
func (p *Plugin) tracking(db *gorm.DB, op ChangeOp) *trackSpec {
	if db.Error != nil || db.DryRun {
		return nil
	}
	spec := p.trackOf(db.Statement)
	if spec == nil || !spec.ops[op] || ownBuffer(db.Statement) == nil {
		return nil
	}
	return spec
}

// trackBeforeCreate notes, for a create with an ON CONFLICT clause, which
// of its rows whose key is set exist already (locking them): the database
// updates those (DO UPDATE) or leaves them (DO NOTHING) instead of
// inserting them.
func (p *Plugin) trackBeforeCreate(db *gorm.DB) {
	spec := p.tracking(db, ChangeCreated)
	stmt := db.Statement
	if spec == nil {
		return
	}
	upsert, doNothing := onConflict(stmt)
	if !upsert {
		return
	}
	// Noted now: the MySQL driver rewrites DO NOTHING as an update of the
	// key to itself when it builds the statement.
	st := &trackState{stmt: stmt, spec: spec, doNothing: doNothing, existed: map[string]bool{}}
	stmt.Settings.Store(trackKey{}, st)
	conds := identityConds(stmt, stmt.ReflectValue)
	if len(conds) == 0 {
		return
	}
	existing, err := p.lockRows(db, spec, conds)
	if err != nil {
		_ = db.AddError(fmt.Errorf("outbox: Track(%s): reading the rows to insert: %w", spec.name, err))
		return
	}
	for i := range existing.Len() {
		id, _ := keyOf(spec, db, existing.Index(i))
		st.existed[id] = true
	}
}

// trackCreated makes the events of an INSERT once it has run (keys
// assigned): created per inserted row; for an upsert, updated (Upsert set)
// per row that existed, unless DO NOTHING left it.
func (p *Plugin) trackCreated(db *gorm.DB) {
	st := ownTrack(db.Statement)
	spec := p.tracking(db, ChangeCreated)
	if spec == nil || db.RowsAffected == 0 {
		return
	}
	stmt := db.Statement
	rows, ok := structRows(stmt.ReflectValue)
	if !ok {
		p.untrackable(db, spec, "a create of values that are not %s structs (a map)", spec.modelType)
		return
	}
	if st == nil {
		st = &trackState{}
	}
	upsert, _ := onConflict(stmt)
	changes := make([]trackedChange, 0, len(rows))
	for _, r := range rows {
		id, _ := keyOf(spec, db, r)
		switch {
		case st.doNothing && (st.existed[id] || zeroKey(spec, stmt, r)):
			// Not inserted: it existed, or GORM gave it no key.
		case zeroKey(spec, stmt, r):
			// A key the database made that the driver does not return
			// (a default other than AUTO_INCREMENT on MySQL).
			p.untrackable(db, spec, "a row inserted without its key in the model (a database default the driver does not return)")
			if spec.strict {
				return
			}
		case st.existed[id]:
			changes = append(changes, trackedChange{Change: Change{Op: ChangeUpdated, Upsert: true, Columns: upsertColumns(stmt)}, row: r})
		default:
			changes = append(changes, trackedChange{Change: Change{Op: ChangeCreated, Upsert: upsert && !st.doNothing}, row: r})
		}
	}
	p.emitTracked(db, spec, changes)
}

// trackBeforeUpdate computes the statement's assignments (as GORM would,
// once), and for a statement that does not name one row by its key reads
// and locks the rows it will change and restricts it to them.
func (p *Plugin) trackBeforeUpdate(db *gorm.DB) {
	spec := p.tracking(db, ChangeUpdated)
	stmt := db.Statement
	if spec == nil || stmt.SQL.Len() > 0 {
		return
	}
	st := &trackState{stmt: stmt, spec: spec}
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
	if singleRow(stmt) && !spec.oldValues {
		return
	}
	p.lockFirst(db, st, whereOf(stmt))
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
	// Rows read first all matched (they were locked): MySQL's count leaves
	// out those the UPDATE did not change, which PostgreSQL and SQLite
	// count, so the rows read decide, alike on every database.
	if db.Error != nil || (db.RowsAffected == 0 && (!st.locked.IsValid() || st.locked.Len() == 0)) {
		return
	}
	var changes []trackedChange
	if st.locked.IsValid() {
		after, err := p.readRows(db, st.spec, st.locked)
		if err != nil {
			p.failTracked(db, err)
			return
		}
		changes = updatedRows(db, st, after)
	} else {
		changes = []trackedChange{updatedRow(st, db.Statement.ReflectValue)}
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
	if singleRow(stmt) && (stmt.Model == nil || stmt.Model == stmt.Dest) {
		return
	}
	conds := whereOf(stmt)
	conds = append(conds, identityConds(stmt, stmt.ReflectValue)...)
	if stmt.Model != nil && stmt.Model != stmt.Dest {
		conds = append(conds, identityConds(stmt, reflect.ValueOf(stmt.Model))...)
	}
	p.lockFirst(db, st, conds)
}

// trackDeleted makes one deleted event per row the DELETE (or the UPDATE
// of a soft delete) removed.
func (p *Plugin) trackDeleted(db *gorm.DB) {
	st := ownTrack(db.Statement)
	if st == nil || db.Error != nil || db.RowsAffected == 0 {
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

// lockFirst reads and locks the rows matching conds, and restricts the
// statement to them. Without conditions GORM refuses the statement (unless
// AllowGlobalUpdate): nothing is read then.
func (p *Plugin) lockFirst(db *gorm.DB, st *trackState, conds []clause.Expression) {
	if len(conds) == 0 && !db.AllowGlobalUpdate {
		return
	}
	rows, err := p.lockRows(db, st.spec, conds)
	if err != nil {
		_ = db.AddError(fmt.Errorf("outbox: Track(%s): reading the rows to change: %w", st.spec.name, err))
		return
	}
	st.locked = rows
	restrict(db.Statement, rows)
}

// untrackable fails the statement under TrackStrict, and logs otherwise.
func (p *Plugin) untrackable(db *gorm.DB, spec *trackSpec, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if spec.strict {
		p.failTracked(db, fmt.Errorf("%w: %s: %s", ErrUntrackable, spec.name, msg))
		return
	}
	spec.logger.WarnContext(db.Statement.Context, "outbox: Track cannot capture this write; no event is written for it",
		"model", spec.name, "detail", msg)
}

// failTracked fails the statement, and its transaction, as a failed Emit
// from one of its hooks would.
func (p *Plugin) failTracked(db *gorm.DB, err error) {
	if buf := ownBuffer(db.Statement); buf != nil && buf.err == nil {
		buf.err = err
	}
	_ = db.AddError(err)
}
