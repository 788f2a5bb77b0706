package outbox

import (
	"fmt"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// conditional reports whether an upsert's DO UPDATE may leave a row that
// exists as it was: it has a WHERE (PostgreSQL, SQLite), or assigns SQL
// expressions (MySQL's IF(…), GREATEST(…)), other than the values
// inserted (excluded.col, VALUES(col)).
func conditional(oc clause.OnConflict) bool {
	if oc.DoNothing {
		return false
	}
	if len(oc.Where.Exprs) > 0 {
		return true
	}
	for _, a := range oc.DoUpdates {
		switch a.Value.(type) {
		case clause.Column:
		case clause.Expression, *gorm.DB:
			return true
		}
	}
	return false
}

// upsertedRows keeps, of the updated changes of a conditional upsert,
// those whose row the statement changed: the rows that existed are read
// again (locked, as they were before the insert) and compared with what
// was read before it, column by column of DO UPDATE. Each kept change has
// the columns' old and new values, and the row as stored.
func (p *Plugin) upsertedRows(db *gorm.DB, st *trackState, changes []trackedChange) ([]trackedChange, error) {
	if len(st.existed) == 0 {
		return changes, nil
	}
	before := reflect.MakeSlice(reflect.SliceOf(st.spec.modelType), 0, len(st.existed))
	for _, r := range st.existed {
		before = reflect.Append(before, r)
	}
	after, err := p.written(db, st.spec, before)
	if err != nil {
		return nil, fmt.Errorf("outbox: Track(%s): reading the rows upserted: %w", st.spec.name, err)
	}
	stored := make(map[string]reflect.Value, after.Len())
	for i := range after.Len() {
		id, _ := keyOf(st.spec, db, after.Index(i))
		stored[id] = after.Index(i)
	}
	ctx := db.Statement.Context
	kept := changes[:0]
	for _, c := range changes {
		id, _ := keyOf(st.spec, db, c.row)
		old, existed := st.existed[id]
		row, ok := stored[id]
		if c.Op != ChangeUpdated || !existed || !ok {
			kept = append(kept, c)
			continue
		}
		c.Old, c.New = map[string]any{}, map[string]any{}
		changed := false
		for _, col := range c.Columns {
			if f := st.spec.schema.LookUpField(col); f != nil {
				o, n := goValue(ctx, f, old), goValue(ctx, f, row)
				c.Old[col], c.New[col] = o, n
				changed = changed || !reflect.DeepEqual(o, n)
			}
		}
		if changed {
			c.row = row
			kept = append(kept, c)
		}
	}
	return kept, nil
}
