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

// whereOf returns (a copy of) the statement's WHERE conditions.
func whereOf(stmt *gorm.Statement) []clause.Expression {
	if c, ok := stmt.Clauses["WHERE"]; ok {
		if w, ok := c.Expression.(clause.Where); ok {
			return append([]clause.Expression(nil), w.Exprs...)
		}
	}
	return nil
}

// orJoined reports whether GORM joins one of exprs to the others with OR
// when it builds their WHERE: it writes a lone Or condition that is not
// the only one as "… OR c", so that the other conditions, the key of a
// single-row statement among them, do not bound the statement.
func orJoined(exprs []clause.Expression) bool {
	if len(exprs) < 2 {
		return false
	}
	for _, e := range exprs {
		if or, ok := e.(clause.OrConditions); ok && len(or.Exprs) == 1 {
			return true
		}
	}
	return false
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

// deleteConds returns the conditions of a delete as gorm:delete builds
// them: the statement's WHERE, then the keys of its value and of its
// model when that is another value.
func deleteConds(stmt *gorm.Statement) []clause.Expression {
	conds := whereOf(stmt)
	conds = append(conds, identityConds(stmt, stmt.ReflectValue)...)
	if stmt.ReflectValue.CanAddr() && stmt.Dest != stmt.Model && stmt.Model != nil {
		conds = append(conds, identityConds(stmt, reflect.ValueOf(stmt.Model))...)
	}
	return conds
}

// refusedUnbounded reports whether gorm:update will refuse the statement
// for want of a WHERE condition (ErrMissingWhereClause), as its check
// does: no WHERE clause, or only the soft-delete scope's condition.
func refusedUnbounded(db *gorm.DB) bool {
	if db.AllowGlobalUpdate {
		return false
	}
	c, ok := db.Statement.Clauses["WHERE"]
	if !ok {
		return true
	}
	if _, soft := db.Statement.Clauses["soft_delete_enabled"]; soft {
		w, _ := c.Expression.(clause.Where)
		return len(w.Exprs) <= 1
	}
	return false
}
