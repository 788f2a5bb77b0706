package outbox

import (
	"errors"
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// trackState is what a tracked statement noted before it ran, for the
// callback that makes its events after it.
type trackState struct {
	stmt       *gorm.Statement
	spec       *trackSpec
	set        clause.Set    // update: the assignments
	ownSet     bool          // the SET clause was added here (GORM removes its own)
	restricted bool          // restrict added its condition to the WHERE
	locked     reflect.Value // []T read and locked first; invalid: a single row by key
	// A create with an ON CONFLICT clause: the rows whose key existed,
	// as read (and locked) before the insert, by key.
	existed     map[string]reflect.Value
	doNothing   bool
	conditional bool // DO UPDATE with a WHERE or SQL expressions
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

// The names of Track's callbacks.
const (
	cbTrackBeforeCreate = "outbox:track_before_create"
	cbTrackCreate       = "outbox:track_create"
	cbTrackBeforeUpdate = "outbox:track_before_update"
	cbTrackUpdate       = "outbox:track_update"
	cbTrackBeforeDelete = "outbox:track_before_delete"
	cbTrackDelete       = "outbox:track_delete"
	cbTrackRaw          = "outbox:track_raw"
)

func (p *Plugin) registerTrackCallbacks(db *gorm.DB) error {
	c := db.Callback()
	return errors.Join(
		c.Create().After("gorm:save_before_associations").Before("gorm:create").Register(cbTrackBeforeCreate, p.trackBeforeCreate),
		c.Create().After("gorm:create").Before("gorm:after_create").Register(cbTrackCreate, p.trackCreated),
		c.Update().After("gorm:save_before_associations").Before("gorm:update").Register(cbTrackBeforeUpdate, p.trackBeforeUpdate),
		c.Update().After("gorm:update").Before("gorm:after_update").Register(cbTrackUpdate, p.trackUpdated),
		c.Delete().After("gorm:delete_before_associations").Before("gorm:delete").Register(cbTrackBeforeDelete, p.trackBeforeDelete),
		c.Delete().After("gorm:delete").Before("gorm:after_delete").Register(cbTrackDelete, p.trackDeleted),
		c.Raw().Before("gorm:raw").Register(cbTrackRaw, p.trackRaw),
		c.Row().Before("gorm:row").Register(cbTrackRaw, p.trackRaw),
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
// inserting them. The keys are read plainly and only the rows found are
// locked: a locking read of a key that does not exist yet locks the gap
// it would go in on MySQL, and two transactions inserting new keys into
// one gap deadlock (the INSERT itself takes no such lock).
func (p *Plugin) trackBeforeCreate(db *gorm.DB) {
	spec := p.tracking(db, ChangeCreated)
	stmt := db.Statement
	if spec == nil {
		return
	}
	oc, upsert := stmt.Clauses["ON CONFLICT"].Expression.(clause.OnConflict)
	if !upsert {
		return
	}
	// Noted now: the MySQL driver rewrites DO NOTHING as an update of the
	// key to itself when it builds the statement.
	st := &trackState{stmt: stmt, spec: spec, doNothing: oc.DoNothing, conditional: conditional(oc), existed: map[string]reflect.Value{}}
	stmt.Settings.Store(trackKey{}, st)
	conds := identityConds(stmt, stmt.ReflectValue)
	if len(conds) == 0 {
		return
	}
	found, err := p.readFirst(db, spec, rowRead{conds: conds})
	if err == nil && found.Len() > 0 && p.writer.drv.ConcurrentWriters() {
		// With one writer (SQLite) the transaction holds them already.
		found, err = p.reread(db, spec, found, true)
	}
	if err != nil {
		_ = db.AddError(fmt.Errorf("outbox: Track(%s): reading the rows to insert: %w", spec.name, err))
		return
	}
	for i := range found.Len() {
		id, _ := keyOf(spec, db, found.Index(i))
		st.existed[id] = found.Index(i)
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
		_, existed := st.existed[id]
		switch {
		case st.doNothing && (existed || zeroKey(spec, stmt, r)):
			// Not inserted: it existed, or GORM gave it no key.
		case zeroKey(spec, stmt, r):
			// A key the database made that the driver does not return
			// (a default other than AUTO_INCREMENT on MySQL).
			p.untrackable(db, spec, "a row inserted without its key in the model (a database default the driver does not return)")
			if spec.strict {
				return
			}
		case existed:
			changes = append(changes, trackedChange{Change: Change{Op: ChangeUpdated, Upsert: true, Columns: upsertColumns(stmt)}, row: r})
		default:
			changes = append(changes, trackedChange{Change: Change{Op: ChangeCreated, Upsert: upsert && !st.doNothing}, row: r})
		}
	}
	if st.conditional {
		var err error
		if changes, err = p.upsertedRows(db, st, changes); err != nil {
			p.failTracked(db, err)
			return
		}
	}
	p.emitTracked(db, spec, changes)
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
