package outbox

import (
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// statementBuffer holds what one statement's hooks emitted until flush.
type statementBuffer struct {
	stmt      *gorm.Statement // the statement it belongs to
	events    []encodedEvent
	err       error         // the first failed Emit of the statement's hooks
	recorders []recorderUse // written by flush, settled by end
	ownTx     bool          // the plugin opened the statement's transaction
	flushed   bool          // later Emits write at once
	failed    bool          // writing the events failed (before any COMMIT)
	errBefore error         // the statement's error before its COMMIT or ROLLBACK
}

type bufferKey struct{}

// bufferOf returns the buffer of stmt's statement, or of the statement stmt
// was cloned from (GORM copies Settings into a clone: a hook's
// tx.WithContext(ctx)) while that one still buffers.
func bufferOf(stmt *gorm.Statement) *statementBuffer {
	if v, ok := stmt.Settings.Load(bufferKey{}); ok {
		if buf := v.(*statementBuffer); !buf.flushed {
			return buf
		}
	}
	return nil
}

// ownBuffer returns the buffer begin made for this very statement: a clone
// of a statement carries its Settings, so a nested statement started from a
// hook's tx.WithContext(ctx) must not act on its parent's buffer.
func ownBuffer(stmt *gorm.Statement) *statementBuffer {
	if v, ok := stmt.Settings.Load(bufferKey{}); ok {
		if buf := v.(*statementBuffer); buf.stmt == stmt {
			return buf
		}
	}
	return nil
}

// inTransaction reports whether the statement's connection is a transaction.
func inTransaction(stmt *gorm.Statement) bool {
	c, ok := stmt.ConnPool.(gorm.TxCommitter)
	return ok && c != nil
}

// beginFor returns the callback that runs after GORM has opened the
// statement's default transaction (if it does) and before the model's
// Before hooks.
func (p *Plugin) beginFor(o op) func(*gorm.DB) {
	return func(db *gorm.DB) {
		stmt := db.Statement
		if db.Error != nil || stmt.Schema == nil {
			return
		}
		buf := &statementBuffer{stmt: stmt}
		stmt.Settings.Store(bufferKey{}, buf)
		if o == opCreate {
			buf.events = p.saves.take(stmt)
		}
		if db.DryRun || inTransaction(stmt) || !p.mayEmit(stmt, buf) {
			return
		}
		// GORM skipped its default transaction (SkipDefaultTransaction):
		// open it, or the row would commit before its events are written.
		tx := db.Begin()
		if tx.Error != nil {
			_ = db.AddError(fmt.Errorf("%w: opening the transaction GORM skipped: %w", ErrNotInTransaction, tx.Error))
			return
		}
		stmt.ConnPool = tx.Statement.ConnPool
		buf.ownTx = true
	}
}

// flushFor returns the callback that runs after the model's After hooks and
// before the commit: it writes the statement's events.
func (p *Plugin) flushFor(o op) func(*gorm.DB) {
	return func(db *gorm.DB) {
		buf := ownBuffer(db.Statement)
		if buf == nil {
			return
		}
		buf.flushed = true
		if buf.err != nil {
			p.failStatement(db, buf, buf.err)
			return
		}
		if db.Error != nil || db.DryRun {
			buf.errBefore = db.Error
			return
		}
		if o == opUpdate && p.saves.handOff(db, buf.events) {
			return // the insert that follows writes them
		}
		events, err := p.collectRecorded(db.Statement, buf)
		if err == nil && len(events) > 0 {
			err = p.writer.write(db, events)
		}
		if err != nil {
			p.failStatement(db, buf, err)
			buf.failed = true
		}
	}
}

// failStatement fails the statement because its events cannot be written,
// whatever its hooks did with Emit's error. When the statement runs inside
// a transaction it did not open (db.Transaction, CreateInBatches, the
// statement that saves it as an association or runs the hook that made
// it), that transaction is rolled back at once (doom): it cannot commit
// the statement's rows without their events, whoever ignores the
// statement's error. The statement's error is then marked, so that the
// statement that opened the transaction fails with it (restoreDoomed).
func (p *Plugin) failStatement(db *gorm.DB, buf *statementBuffer, err error) {
	if !errors.Is(db.Error, err) {
		_ = db.AddError(err)
	}
	if !buf.ownTx && !gormStarted(db) {
		doom(db.Statement, err)
		if db.Error != nil {
			db.Error = &doomedError{db.Error}
		}
	}
	buf.errBefore = db.Error
}

// gormStarted reports whether GORM opened the statement's transaction (its
// default transaction), and so commits or rolls it back at its end.
func gormStarted(db *gorm.DB) bool {
	_, ok := db.InstanceGet("gorm:started_transaction")
	return ok
}

// end runs once the statement has committed or rolled back (after GORM's
// commit): it ends the transaction the plugin opened, and settles the
// recorded events the statement wrote.
func (p *Plugin) end(db *gorm.DB) {
	buf := ownBuffer(db.Statement)
	if buf == nil {
		return
	}
	db.Statement.Settings.Delete(bufferKey{})
	if buf.ownTx {
		if db.Error != nil {
			db.Rollback()
		} else {
			db.Commit()
		}
		db.Statement.ConnPool = db.ConnPool
	}
	restoreDoomed(db, buf.errBefore)
	if len(buf.recorders) > 0 {
		o := unknown
		if buf.ownTx || gormStarted(db) {
			switch {
			case db.Error == nil:
				o = committed
			case buf.failed: // failed before its COMMIT was tried
				o = rolledBack
			}
		}
		for _, u := range buf.recorders {
			u.r.settle(u.n, o)
		}
	}
}
