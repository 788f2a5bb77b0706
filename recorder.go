package outbox

import (
	"reflect"
	"slices"

	"gorm.io/gorm"
)

// Recorder collects events on an aggregate until it is saved. Embed it in a
// model (it has no columns) and call Record; when the model is created,
// saved, updated or deleted through GORM, the plugin writes the recorded
// events in the same transaction, after the statement's last hook.
//
//	type Order struct {
//		ID uint
//		outbox.Recorder
//	}
//	order.Record(outbox.Event{Type: "order.placed"})
//	db.Create(&order)
//
// When recorded events are cleared, and what RecordedEvents shows:
//
//   - A save that runs in its own transaction (GORM's default transaction,
//     or the one the plugin opens under SkipDefaultTransaction) clears the
//     events it wrote once that transaction has committed.
//   - A save that fails in its own transaction clears nothing: the next
//     save writes the events (encoded anew).
//   - A save inside an enclosing transaction (db.Transaction, a
//     CreateInBatches of more than one batch, db.Begin) cannot know whether
//     that transaction will commit, so it keeps the events. It gives each
//     the ID it was written under (a new UUIDv7 unless Event.ID was set) and
//     keeps the bytes it wrote (the payload as encoded then): the next save
//     of the aggregate writes them again under the same IDs, a no-op for
//     those that committed, and the real write for those that were rolled
//     back (by a deadlock, a later error, a retried CreateInBatches).
//     Events recorded on an aggregate are thus written by the save that
//     commits, once. The same holds when the COMMIT of the save's own
//     transaction fails, as its outcome is then unknown.
//
// RecordedEvents returns the events not yet known to be committed: those
// never written, and those written inside an enclosing transaction, which
// show the ID they were written under. After db.Transaction has returned
// nil, the latter are committed: drop the aggregate, or let its next save
// (in its own transaction) write them again as no-ops and clear them. Do
// not keep such an aggregate for longer than the relay's retention of
// published rows before saving it again, or the kept events are written,
// and delivered, anew.
//
// The plugin reaches a Recorder through the statement's value: a pointer,
// a slice of values or of pointers (CreateInBatches), or the model of
// db.Model(&order).Updates(...). It cannot reach one through
// db.Delete(&Order{}, id), db.Table(...), Exec, or
// db.Model(&Order{}).Where(...).Update(...), whose model is a fresh zero
// value.
type Recorder struct {
	events []recordedEvent
}

// recordedEvent is an Event and, once a save has tried to write it, the
// column values (ID included) it was written with.
type recordedEvent struct {
	event Event
	enc   *encodedEvent
}

// Record appends events to be written when the aggregate is next saved.
func (r *Recorder) Record(events ...Event) {
	for _, e := range events {
		r.events = append(r.events, recordedEvent{event: e})
	}
}

// RecordedEvents returns a copy of the events not yet known to be
// committed (see Recorder); an event already written inside an enclosing
// transaction has its ID set to the one it was written under.
func (r *Recorder) RecordedEvents() []Event {
	out := make([]Event, len(r.events))
	for i, e := range r.events {
		out[i] = e.event
		if e.enc != nil {
			out[i].ID = e.enc.EventID
		}
	}
	return out
}

func (r *Recorder) outboxRecorder() *Recorder { return r }

type recorderHolder interface{ outboxRecorder() *Recorder }

var recorderHolderType = reflect.TypeFor[recorderHolder]()

// recorderUse is a Recorder whose first n events a statement wrote.
type recorderUse struct {
	r *Recorder
	n int
}

// outcome is what became of the transaction in which a statement wrote
// recorded events.
type outcome int

const (
	committed  outcome = iota // the statement's own transaction committed
	rolledBack                // the statement failed in its own transaction
	unknown                   // an enclosing transaction, or its COMMIT failed
)

// settle ends a statement that wrote the first n events. Committed: they
// are cleared. Rolled back: they are forgotten as written, so that the next
// save encodes them anew. Unknown: they keep their encoding, marked as
// dedupe keys, so that the next save writes the same rows, a no-op where
// they were committed.
func (r *Recorder) settle(n int, o outcome) {
	n = min(n, len(r.events))
	if o == committed {
		r.events = slices.Delete(r.events, 0, n)
		return
	}
	for i := range r.events[:n] {
		switch e := r.events[i].enc; {
		case e == nil:
		case o == rolledBack:
			r.events[i].enc = nil
		default:
			e.ownID = true
		}
	}
}

// collectRecorded returns the statement's buffered events followed by the
// events recorded on its models, encoding each recorded event the first
// time it is written.
func (p *Plugin) collectRecorded(stmt *gorm.Statement, buf *statementBuffer) ([]encodedEvent, error) {
	events := buf.events
	buf.events = nil
	if !p.hasRecorder(stmt) {
		return events, nil
	}
	var (
		err  error
		wc   writeContext
		once bool
	)
	eachRecorder(stmt.ReflectValue, func(r *Recorder) {
		if err != nil || len(r.events) == 0 {
			return
		}
		buf.recorders = append(buf.recorders, recorderUse{r, len(r.events)})
		for i := range r.events {
			e := &r.events[i]
			if e.enc == nil {
				if !once {
					wc, once = p.writeContextOf(stmt.Context), true
				}
				var enc encodedEvent
				if enc, err = e.event.encode(&wc); err != nil {
					return
				}
				e.enc = &enc
			}
			events = append(events, *e.enc)
		}
	})
	return events, err
}

// hasRecorder reports whether the statement's model embeds a Recorder.
func (p *Plugin) hasRecorder(stmt *gorm.Statement) bool {
	if stmt.Schema == nil {
		return false
	}
	t := stmt.Schema.ModelType
	if v, ok := p.recorderTypes.Load(t); ok {
		return v.(bool)
	}
	ok := reflect.PointerTo(t).Implements(recorderHolderType)
	p.recorderTypes.Store(t, ok)
	return ok
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
