package outbox

import (
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"
)

// structRows returns the model structs of a statement's value (a struct, a
// pointer to one, or a slice or array of either), addressable where the
// value is; ok is false for anything else (a map).
func structRows(v reflect.Value) (rows []reflect.Value, ok bool) {
	v = reflect.Indirect(v)
	switch v.Kind() {
	case reflect.Struct:
		return []reflect.Value{v}, true
	case reflect.Slice, reflect.Array:
		rows = make([]reflect.Value, 0, v.Len())
		for i := range v.Len() {
			e := v.Index(i)
			for e.Kind() == reflect.Pointer || e.Kind() == reflect.Interface {
				if e.IsNil() {
					return nil, false
				}
				e = e.Elem()
			}
			if e.Kind() != reflect.Struct {
				return nil, false
			}
			rows = append(rows, e)
		}
		return rows, true
	}
	return nil, false
}

// onConflict reports whether a create has an ON CONFLICT clause, and
// whether it is DO NOTHING.
func onConflict(stmt *gorm.Statement) (upsert, doNothing bool) {
	c, ok := stmt.Clauses["ON CONFLICT"]
	if !ok {
		return false, false
	}
	oc, _ := c.Expression.(clause.OnConflict)
	return true, oc.DoNothing
}

// upsertColumns returns the columns an upsert's DO UPDATE writes (GORM has
// turned UpdateAll into them by the time the statement has run).
func upsertColumns(stmt *gorm.Statement) []string {
	c, _ := stmt.Clauses["ON CONFLICT"]
	oc, _ := c.Expression.(clause.OnConflict)
	cols := make([]string, 0, len(oc.DoUpdates))
	for _, a := range oc.DoUpdates {
		cols = append(cols, a.Column.Name)
	}
	return cols
}

func zeroKey(spec *trackSpec, stmt *gorm.Statement, row reflect.Value) bool {
	for _, f := range spec.schema.PrimaryFields {
		if _, zero := f.ValueOf(stmt.Context, row); zero {
			return true
		}
	}
	return false
}

// singleRow reports whether the statement's value is one struct whose
// primary key is set: GORM then writes that row by its key.
func singleRow(stmt *gorm.Statement) bool {
	v := reflect.Indirect(stmt.ReflectValue)
	if v.Kind() != reflect.Struct {
		return false
	}
	for _, f := range stmt.Schema.PrimaryFields {
		if _, zero := f.ValueOf(stmt.Context, v); zero {
			return false
		}
	}
	return true
}

// hasNonKeyValue reports whether a model has a field other than its key
// (and its soft-delete time) set: it was loaded, or filled in.
func hasNonKeyValue(spec *trackSpec, db *gorm.DB, row reflect.Value) bool {
	for _, f := range spec.schema.Fields {
		if f.PrimaryKey || f.DBName == "" || f.FieldType == reflect.TypeFor[gorm.DeletedAt]() {
			continue
		}
		if _, zero := f.ValueOf(db.Statement.Context, row); !zero {
			return true
		}
	}
	return false
}

// whereOf returns the statement's WHERE conditions.
func whereOf(stmt *gorm.Statement) []clause.Expression {
	if c, ok := stmt.Clauses["WHERE"]; ok {
		if w, ok := c.Expression.(clause.Where); ok {
			return append([]clause.Expression(nil), w.Exprs...)
		}
	}
	return nil
}

// identityConds returns the primary-key condition GORM adds for the rows
// of v that have their key set, as the delete callback does.
func identityConds(stmt *gorm.Statement, v reflect.Value) []clause.Expression {
	_, values := schema.GetIdentityFieldValuesMap(stmt.Context, v, stmt.Schema.PrimaryFields)
	column, in := schema.ToQueryValues(stmt.Table, stmt.Schema.PrimaryFieldDBNames, values)
	if len(in) == 0 {
		return nil
	}
	return []clause.Expression{clause.IN{Column: column, Values: in}}
}

// session is a new statement on db's connection (its transaction), without
// hooks, for the reads Track makes.
func trackSession(db *gorm.DB, spec *trackSpec) *gorm.DB {
	q := db.Session(&gorm.Session{NewDB: true, SkipHooks: true}).
		Model(reflect.New(spec.modelType).Interface()).Table(db.Statement.Table)
	order := make([]clause.OrderByColumn, len(spec.schema.PrimaryFieldDBNames))
	for i, c := range spec.schema.PrimaryFieldDBNames {
		order[i] = clause.OrderByColumn{Column: clause.Column{Table: clause.CurrentTable, Name: c}}
	}
	return q.Order(clause.OrderBy{Columns: order})
}

// lockRows reads the rows matching conds (in the statement's scope: soft
// deleted rows excluded unless Unscoped), locking them until the
// transaction ends. SQLite's driver leaves the locking clause out: its
// transaction holds the database's write lock.
func (p *Plugin) lockRows(db *gorm.DB, spec *trackSpec, conds []clause.Expression) (reflect.Value, error) {
	rows := reflect.New(reflect.SliceOf(spec.modelType))
	q := trackSession(db, spec)
	if db.Statement.Unscoped {
		q = q.Unscoped()
	}
	if len(conds) > 0 {
		q = q.Clauses(clause.Where{Exprs: conds})
	}
	err := q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).Find(rows.Interface()).Error
	return rows.Elem(), err
}

// restrict limits the statement to the rows read (none: no row).
func restrict(stmt *gorm.Statement, rows reflect.Value) {
	if rows.Len() == 0 {
		stmt.AddClause(clause.Where{Exprs: []clause.Expression{clause.Expr{SQL: "1 = 0"}}})
		return
	}
	stmt.AddClause(clause.Where{Exprs: identityConds(stmt, rows)})
}

// readRows reads rows again by their keys, as the statement left them.
func (p *Plugin) readRows(db *gorm.DB, spec *trackSpec, rows reflect.Value) (reflect.Value, error) {
	after := reflect.New(reflect.SliceOf(spec.modelType))
	conds := identityConds(db.Statement, rows)
	if len(conds) == 0 {
		return after.Elem(), nil
	}
	err := trackSession(db, spec).Unscoped().Clauses(clause.Where{Exprs: conds}).Find(after.Interface()).Error
	return after.Elem(), err
}
