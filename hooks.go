package outbox

import (
	"context"
	"reflect"
	"slices"

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
// transaction (a plain *gorm.DB, or a statement run with
// SkipDefaultTransaction); an error wrapping ErrInvalidEvent, naming the
// field, for an invalid event (nothing is written); ErrDuplicateEvent when
// an event ID is already stored with other content; ErrNotRegistered
// without db.Use(&outbox.Plugin{}). Return its error from the hook or the
// transaction function: an error ignored inside db.Transaction commits the
// rest on MySQL and SQLite.
//
// In a DryRun session Emit validates and writes nothing.
func Emit(tx *gorm.DB, events ...Event) error {
	p, err := Lookup(tx)
	if err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	stmt := tx.Statement
	enc, err := encodeAll(stmt.Context, events)
	if err != nil {
		return err
	}
	if tx.DryRun {
		return nil
	}
	if !inTransaction(stmt) {
		return ErrNotInTransaction
	}
	if buf := bufferOf(stmt); buf != nil {
		buf.events = append(buf.events, enc...)
		return nil
	}
	return p.writer.write(tx, enc)
}

// Recorder collects events on an aggregate until it is saved. Embed it in a
// model (it has no columns) and call Record; when the model is created,
// saved, updated or deleted through GORM, the plugin writes the recorded
// events in the same transaction and, once the statement has succeeded,
// clears them. A failed statement leaves them recorded, and a second save
// does not write them again.
//
//	type Order struct {
//		ID uint
//		outbox.Recorder
//	}
//	order.Record(outbox.Event{Type: "order.placed"})
//	db.Create(&order)
//
// The plugin reaches a Recorder through the statement's value: a pointer,
// a slice of values or of pointers (CreateInBatches), or the model of
// db.Model(&order).Updates(...). It cannot reach one through
// db.Delete(&Order{}, id), db.Table(...), Exec, or
// db.Model(&Order{}).Where(...).Update(...), whose model is a fresh zero
// value. Within db.Transaction, events are cleared when the statement
// succeeds, even if the transaction rolls back later.
type Recorder struct {
	events  []Event
	pending int // how many of events the current statement wrote
}

// Record appends events to be written when the aggregate is next saved.
func (r *Recorder) Record(events ...Event) { r.events = append(r.events, events...) }

// RecordedEvents returns a copy of the events not yet written.
func (r *Recorder) RecordedEvents() []Event { return slices.Clone(r.events) }

func (r *Recorder) outboxRecorder() *Recorder { return r }

type recorderHolder interface{ outboxRecorder() *Recorder }

var recorderHolderType = reflect.TypeFor[recorderHolder]()

// statementBuffer holds what one statement's hooks emitted until flush.
type statementBuffer struct {
	events    []encodedEvent
	recorders []*Recorder // written by flush, cleared by clear
}

type bufferKey struct{}

func bufferOf(stmt *gorm.Statement) *statementBuffer {
	if v, ok := stmt.Settings.Load(bufferKey{}); ok {
		return v.(*statementBuffer)
	}
	return nil
}

// inTransaction reports whether the statement's connection is a transaction.
func inTransaction(stmt *gorm.Statement) bool {
	c, ok := stmt.ConnPool.(gorm.TxCommitter)
	return ok && c != nil
}

// begin runs after GORM has opened the statement's default transaction and
// before the model's Before hooks.
func (p *Plugin) begin(db *gorm.DB) {
	if db.Error != nil || db.Statement.Schema == nil {
		return
	}
	db.Statement.Settings.Store(bufferKey{}, &statementBuffer{})
	if db.DryRun || inTransaction(db.Statement) || !p.hasRecorder(db.Statement) {
		return
	}
	recorded := false
	eachRecorder(db.Statement.ReflectValue, func(r *Recorder) { recorded = recorded || len(r.events) > 0 })
	if recorded {
		// Refuse before the business row is written.
		_ = db.AddError(ErrNotInTransaction)
	}
}

// flush runs after the model's After hooks and before the commit.
func (p *Plugin) flush(db *gorm.DB) {
	buf := bufferOf(db.Statement)
	if buf == nil {
		return
	}
	if db.Error != nil || db.DryRun {
		db.Statement.Settings.Delete(bufferKey{})
		return
	}
	events := buf.events
	buf.events = nil
	if p.hasRecorder(db.Statement) {
		var err error
		eachRecorder(db.Statement.ReflectValue, func(r *Recorder) {
			if err != nil || len(r.events) == 0 {
				return
			}
			var enc []encodedEvent
			if enc, err = encodeAll(db.Statement.Context, r.events); err == nil {
				r.pending = len(r.events)
				buf.recorders = append(buf.recorders, r)
				events = append(events, enc...)
			}
		})
		if err != nil {
			_ = db.AddError(err)
			return
		}
	}
	if len(events) == 0 {
		return
	}
	if !inTransaction(db.Statement) {
		_ = db.AddError(ErrNotInTransaction)
		return
	}
	_ = db.AddError(p.writer.write(db, events))
}

// clear runs once the statement has committed or rolled back.
func (p *Plugin) clear(db *gorm.DB) {
	buf := bufferOf(db.Statement)
	if buf == nil {
		return
	}
	db.Statement.Settings.Delete(bufferKey{})
	for _, r := range buf.recorders {
		if db.Error == nil && r.pending > 0 {
			r.events = slices.Delete(r.events, 0, min(r.pending, len(r.events)))
		}
		r.pending = 0
	}
}

// eachRecorder calls fn for the Recorder of every model in v: a struct, a
// pointer to one, or a slice or array of either.
func eachRecorder(v reflect.Value, fn func(*Recorder)) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			eachRecorder(v.Elem(), fn)
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			eachRecorder(v.Index(i), fn)
		}
	case reflect.Struct:
		if v.CanAddr() {
			if h, ok := v.Addr().Interface().(recorderHolder); ok {
				if r := h.outboxRecorder(); r != nil {
					fn(r)
				}
			}
		}
	}
}

func encodeAll(ctx context.Context, events []Event) ([]encodedEvent, error) {
	trace := traceHeaders(ctx)
	out := make([]encodedEvent, len(events))
	for i := range events {
		var err error
		if out[i], err = events[i].encode(trace); err != nil {
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
