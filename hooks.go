package outbox

import (
	"context"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"
)

// Emit writes events to the outbox through tx's transaction, so that they
// commit or roll back with the caller's other writes. Call it from a model
// hook (AfterCreate, AfterUpdate, AfterSave, AfterDelete and the Before
// hooks) with the tx the hook receives, or inside db.Transaction with its tx.
//
// In a hook, the events are written together with the other events of the
// same statement in one multi-row INSERT just before the statement's
// transaction commits; elsewhere they are written at once.
//
// Emit returns ErrNotInTransaction, and writes nothing, when tx is not in a
// transaction (a plain *gorm.DB outside db.Transaction); an error wrapping
// ErrInvalidEvent, naming the field, for an invalid event (nothing is
// written); ErrDuplicateEvent when an event ID is already stored with other
// content; ErrNotRegistered without db.Use(&outbox.Plugin{}).
//
// An Emit that fails in a transaction fails that transaction, whatever the
// caller does with the error, on every database:
//
//   - From a model hook, the statement fails with the error (for an event
//     emitted from a hook, a duplicate ID is found when the statement's
//     events are written, after its last hook, and fails it the same way).
//     If GORM (or, under SkipDefaultTransaction, the plugin) opened the
//     statement's transaction, it is rolled back at the statement's end; if
//     the statement runs inside an enclosing transaction (db.Transaction,
//     CreateInBatches), that transaction is rolled back at once.
//   - Called directly with a transaction's tx, the error is added to tx
//     and the transaction is rolled back at once, savepoints included:
//     nothing commits, and db.Transaction returns an error even if its
//     function returns nil, one that says the transaction was rolled back
//     and wraps Emit's error (errors.Is(err, ErrInvalidEvent)) and
//     sql.ErrTxDone. Later statements through tx fail with it too.
//
// Return Emit's error anyway: the statement's error then says why.
//
// In a DryRun session Emit validates and writes nothing.
//
// To announce a state change, test tx.Statement.Changed in BeforeUpdate or
// BeforeSave: in AfterUpdate it is always false. See the example.
func Emit(tx *gorm.DB, events ...Event) error {
	p, err := Lookup(tx)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	stmt := tx.Statement
	buf := bufferOf(stmt)
	enc, err := p.encodeAll(stmt.Context, events)
	switch {
	case err != nil:
	case tx.DryRun:
		return nil
	case !inTransaction(stmt):
		return ErrNotInTransaction
	case buf != nil:
		buf.events = append(buf.events, enc...)
		return nil
	default:
		if err = p.writer.write(tx, enc); err == nil {
			return nil
		}
	}
	switch {
	case buf != nil: // failed by flush, after the last hook
		if buf.err == nil {
			buf.err = err
		}
	case inTransaction(stmt) && !tx.DryRun:
		_ = tx.AddError(err)
		doom(stmt, err)
	}
	return err
}

func (p *Plugin) encodeAll(ctx context.Context, events []Event) ([]encodedEvent, error) {
	c := p.writeContextOf(ctx)
	out := make([]encodedEvent, len(events))
	for i := range events {
		var err error
		if out[i], err = events[i].encode(&c); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// traceHeaders returns the W3C trace context of ctx's current span, or nil.
func traceHeaders(ctx context.Context) map[string]string {
	if ctx == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	if len(c) == 0 {
		return nil
	}
	return c
}
