package outbox

import (
	"reflect"
	"slices"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// The reads Track makes around a statement, in its transaction, and the
// condition it adds to the statement so that it writes the rows read.

// rowRead says how to read rows for a statement.
type rowRead struct {
	conds []clause.Expression
	// scoped applies the model's query scope (soft delete, unless the
	// statement is Unscoped) on top of conds; conds already built with
	// it (an update's WHERE) are read as they are.
	scoped bool
	// limited applies the statement's ORDER BY and LIMIT, where its
	// dialect writes them into its UPDATE or DELETE (MySQL).
	limited bool
	// lock makes a locking read (SELECT … FOR UPDATE; SQLite's driver
	// leaves the clause out, its transaction holding the write lock): it
	// reads the latest rows, not a REPEATABLE READ snapshot, and keeps
	// them until the transaction ends. A locking read of a key that does
	// not exist locks the gap where it would be (MySQL): only rows known
	// to exist are read so.
	lock bool
}

// readFirst reads rows ahead of the statement that writes them: its
// transaction becomes a writer first (sqldriver.Writer.BeginWrite): on
// SQLite a deferred transaction that reads first cannot write once
// another writer has committed, where the statement alone waits for the
// lock and runs.
func (p *Plugin) readFirst(db *gorm.DB, spec *trackSpec, r rowRead) (reflect.Value, error) {
	s := db.Session(&gorm.Session{NewDB: true, SkipHooks: true})
	if err := p.writer.drv.BeginWrite(s, p.table); err != nil {
		return reflect.Value{}, err
	}
	return p.readRows(db, spec, r)
}

// readRows reads the rows r names (every row when r has no condition,
// which only a statement allowed to be global asks for) through db's
// connection, without hooks, in key order or the statement's.
func (p *Plugin) readRows(db *gorm.DB, spec *trackSpec, r rowRead) (reflect.Value, error) {
	rows := reflect.New(reflect.SliceOf(spec.modelType))
	stmt := db.Statement
	q := db.Session(&gorm.Session{NewDB: true, SkipHooks: true}).
		Model(reflect.New(spec.modelType).Interface()).Table(stmt.Table)
	if !r.scoped || stmt.Unscoped {
		q = q.Unscoped()
	}
	if len(r.conds) > 0 {
		q = q.Clauses(clause.Where{Exprs: r.conds})
	}
	if limit, ok := stmt.Clauses["LIMIT"]; r.limited && ok && slices.Contains(stmt.BuildClauses, "LIMIT") {
		// The rows the statement's LIMIT picks, in its order: the same
		// plan as the UPDATE or DELETE it is about to run.
		if order, ok := stmt.Clauses["ORDER BY"]; ok && order.Expression != nil {
			q = q.Clauses(order.Expression)
		}
		q = q.Clauses(limit.Expression)
	} else {
		q = q.Order(keyOrder(spec))
	}
	if r.lock {
		q = q.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	err := q.Find(rows.Interface()).Error
	return rows.Elem(), err
}

func keyOrder(spec *trackSpec) clause.OrderBy {
	order := make([]clause.OrderByColumn, len(spec.schema.PrimaryFieldDBNames))
	for i, c := range spec.schema.PrimaryFieldDBNames {
		order[i] = clause.OrderByColumn{Column: clause.Column{Table: clause.CurrentTable, Name: c}}
	}
	return clause.OrderBy{Columns: order}
}

// reread reads rows again by their keys, locking them with lock.
func (p *Plugin) reread(db *gorm.DB, spec *trackSpec, rows reflect.Value, lock bool) (reflect.Value, error) {
	conds := identityConds(db.Statement, rows)
	if len(conds) == 0 {
		return reflect.New(reflect.SliceOf(spec.modelType)).Elem(), nil
	}
	return p.readRows(db, spec, rowRead{conds: conds, lock: lock})
}

// written reads rows again as the statement that has just run left them:
// with a locking read where a plain one may return the transaction's
// snapshot of a row the statement matched but did not change (InnoDB
// under REPEATABLE READ; sqldriver.Writer.SnapshotAfterUpdate).
func (p *Plugin) written(db *gorm.DB, spec *trackSpec, rows reflect.Value) (reflect.Value, error) {
	return p.reread(db, spec, rows, p.writer.drv.SnapshotAfterUpdate())
}

// restrict limits the statement to the rows read (none: no row): its
// WHERE becomes "(<the WHERE GORM builds>) AND <key> IN (…)". The
// condition is added when the clause is built, so that conditions GORM
// adds later (the soft-delete scope, which regroups the others when one
// is an Or) stay inside the group; the clause's own conditions, which
// GORM's missing-WHERE check counts, are left as they are.
func restrict(stmt *gorm.Statement, rows reflect.Value) {
	var only clause.Expression = clause.Expr{SQL: "1 = 0"}
	if rows.Len() > 0 {
		only = identityConds(stmt, rows)[0]
	}
	c := stmt.Clauses["WHERE"]
	c.Name = "WHERE"
	c.Builder = func(c clause.Clause, b clause.Builder) {
		b.WriteString("WHERE ")
		if w, ok := c.Expression.(clause.Where); ok && len(w.Exprs) > 0 {
			b.WriteByte('(')
			w.Build(b)
			b.WriteString(") AND ")
		}
		only.Build(b)
	}
	stmt.Clauses["WHERE"] = c
}

// unrestrict removes restrict's condition from a statement that has run,
// for a statement value used again.
func unrestrict(stmt *gorm.Statement) {
	if c, ok := stmt.Clauses["WHERE"]; ok && c.Builder != nil {
		c.Builder = nil
		stmt.Clauses["WHERE"] = c
	}
}
