package outbox

import (
	"context"
	"database/sql"
	"errors"

	"gorm.io/gorm"
)

// A transaction whose events could not be written is rolled back at once
// (doom), whatever the caller does with the error: it must not commit its
// rows without their events.

// rolledBackError is what a doomed transaction's connection returns: to
// its COMMIT (db.Transaction's, when the function ignored the error), its
// ROLLBACK and every later statement. It wraps the cause and
// sql.ErrTxDone.
type rolledBackError struct{ cause error }

func (e *rolledBackError) Error() string {
	return "outbox: the transaction was rolled back when its events could not be written; nothing in it was committed"
}

func (e *rolledBackError) Unwrap() []error { return []error{e.cause, sql.ErrTxDone} }

// doomedError marks the error of a statement that doomed a transaction it
// did not open: the statement that opened it then fails with this error,
// not with the "transaction has already been committed or rolled back"
// of its own rollback (see restoreDoomed).
type doomedError struct{ error }

func (e *doomedError) Unwrap() error { return e.error }

// doomedConn stands for a doomed transaction on the statement that doomed
// it, and on the statements made from it afterwards.
type doomedConn struct {
	gorm.ConnPool // the transaction, rolled back: QueryRowContext reports sql.ErrTxDone
	err           *rolledBackError
}

func (c *doomedConn) PrepareContext(context.Context, string) (*sql.Stmt, error) { return nil, c.err }

func (c *doomedConn) ExecContext(context.Context, string, ...any) (sql.Result, error) {
	return nil, c.err
}

func (c *doomedConn) QueryContext(context.Context, string, ...any) (*sql.Rows, error) {
	return nil, c.err
}

func (c *doomedConn) Commit() error   { return c.err }
func (c *doomedConn) Rollback() error { return c.err }

// doom rolls back the transaction of stmt's connection, if it has one,
// and puts a doomedConn in its place: stmt's later use (db.Transaction's
// COMMIT through the same tx, the statements made from it) fails with an
// error that says so and wraps cause.
func doom(stmt *gorm.Statement, cause error) {
	c, ok := stmt.ConnPool.(gorm.TxCommitter)
	if !ok || c == nil {
		return
	}
	if _, done := c.(*doomedConn); done {
		return
	}
	_ = c.Rollback()
	stmt.ConnPool = &doomedConn{ConnPool: stmt.ConnPool, err: &rolledBackError{cause: cause}}
}

// restoreDoomed gives back a statement's error as it was before its
// default transaction was rolled back, when a statement it ran (an
// association's, a hook's) had doomed that transaction already: GORM's
// rollback then fails with sql.ErrTxDone, and joining it to the error
// (gorm.DB.AddError) keeps only the first error's message, not its chain
// (errors.Is(err, ErrInvalidEvent) would fail).
func restoreDoomed(db *gorm.DB, before error) {
	var d *doomedError
	if before == nil || db.Error == before || !errors.As(before, &d) || !errors.Is(db.Error, sql.ErrTxDone) {
		return
	}
	db.Error = before
	if db.Statement.Result != nil {
		db.Statement.Result.Error = before
	}
}
