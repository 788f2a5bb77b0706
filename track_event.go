package outbox

import (
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"strconv"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// trackedChange is a Change about to become an event, with its row.
type trackedChange struct {
	Change
	row    reflect.Value // the model struct
	loaded bool          // deleted: the row's values are known
}

// changeWire is Change as encoded: the row marshalled in the same pass.
type changeWire struct {
	Op      ChangeOp       `json:"op"`
	Key     map[string]any `json:"key"`
	Row     any            `json:"row,omitempty"`
	Columns []string       `json:"changed,omitempty"`
	Old     map[string]any `json:"old,omitempty"`
	New     map[string]any `json:"new,omitempty"`
	Soft    bool           `json:"soft,omitempty"`
	Upsert  bool           `json:"upsert,omitempty"`
}

// updatedRow is the change of a single-row update: the model as written
// and the values assigned (SQL expressions left out of New).
func updatedRow(db *gorm.DB, st *trackState, row reflect.Value) trackedChange {
	c := trackedChange{Change: Change{Op: ChangeUpdated}, row: reflect.Indirect(row)}
	c.Columns = make([]string, 0, len(st.set))
	for _, a := range st.set {
		c.Columns = append(c.Columns, a.Column.Name)
		switch a.Value.(type) {
		case clause.Expression, *gorm.DB:
		default:
			if c.New == nil {
				c.New = make(map[string]any, len(st.set))
			}
			c.New[a.Column.Name] = assignedValue(db.Statement.Context, st.spec.schema.LookUpField(a.Column.Name), a.Value)
		}
	}
	return c
}

// updatedRows are the changes of an update whose rows were read first:
// old values from that read, the row and new values from the read after.
func updatedRows(db *gorm.DB, st *trackState, after reflect.Value) []trackedChange {
	ctx := db.Statement.Context
	byKey := make(map[string]reflect.Value, after.Len())
	for i := range after.Len() {
		id, _ := keyOf(st.spec, db, after.Index(i))
		byKey[id] = after.Index(i)
	}
	out := make([]trackedChange, 0, st.locked.Len())
	for i := range st.locked.Len() {
		old := st.locked.Index(i)
		id, _ := keyOf(st.spec, db, old)
		row, ok := byKey[id]
		if !ok {
			row = old // its key was changed: the new key is unknown
		}
		c := trackedChange{Change: Change{Op: ChangeUpdated}, row: row}
		c.Old, c.New = map[string]any{}, map[string]any{}
		for _, a := range st.set {
			c.Columns = append(c.Columns, a.Column.Name)
			if f := st.spec.schema.LookUpField(a.Column.Name); f != nil {
				c.Old[a.Column.Name] = goValue(ctx, f, old)
				if ok {
					c.New[a.Column.Name] = goValue(ctx, f, row)
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// keyOf returns a row's primary key as an aggregate id ("7", or
// "a=1,b=x" for a composite key, values query-escaped) and as a map.
func keyOf(spec *trackSpec, db *gorm.DB, row reflect.Value) (string, map[string]any) {
	fields := spec.schema.PrimaryFields
	key := make(map[string]any, len(fields))
	parts := make([]string, len(fields))
	for i, f := range fields {
		v := goValue(db.Statement.Context, f, row)
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() {
			v = rv.Elem().Interface()
		}
		key[f.DBName] = v
		parts[i] = formatKey(v)
		if len(fields) > 1 {
			parts[i] = f.DBName + "=" + url.QueryEscape(parts[i])
		}
	}
	return strings.Join(parts, ","), key
}

// formatKey formats a key value, without fmt for the common types.
func formatKey(v any) string {
	switch k := v.(type) {
	case string:
		return k
	case int:
		return strconv.Itoa(k)
	case int64:
		return strconv.FormatInt(k, 10)
	case int32:
		return strconv.FormatInt(int64(k), 10)
	case uint:
		return strconv.FormatUint(uint64(k), 10)
	case uint64:
		return strconv.FormatUint(k, 10)
	case uint32:
		return strconv.FormatUint(uint64(k), 10)
	}
	return fmt.Sprint(v)
}

// emitTracked turns changes into events (filter, mapper and options
// applied) and adds them to the statement's buffer, which the plugin's
// flush writes before the commit.
func (p *Plugin) emitTracked(db *gorm.DB, spec *trackSpec, changes []trackedChange) {
	buf := ownBuffer(db.Statement)
	if buf == nil || len(changes) == 0 {
		return
	}
	events := make([]Event, 0, len(changes))
	for i := range changes {
		e, ok, err := p.trackedEvent(db, spec, &changes[i])
		if err != nil {
			p.failTracked(db, err)
			return
		}
		if ok {
			events = append(events, e)
		}
	}
	enc, err := p.encodeAll(db.Statement.Context, events)
	if err != nil {
		p.failTracked(db, fmt.Errorf("outbox: Track(%s): %w%s", spec.name, err, p.registerHint(spec)))
		return
	}
	buf.events = append(buf.events, enc...)
}

func (p *Plugin) trackedEvent(db *gorm.DB, spec *trackSpec, c *trackedChange) (Event, bool, error) {
	id, key := keyOf(spec, db, c.row)
	c.Key, c.fields = key, spec.fields
	ptr := rowPointer(c.row)
	if !spec.ops[c.Op] || (spec.filter != nil && !spec.filter(&c.Change, ptr)) {
		return Event{}, false, nil
	}
	if spec.key != nil {
		id = spec.key(ptr)
	}
	w := changeWire{Op: c.Op, Key: key, Columns: c.Columns, Old: c.Old, New: c.New, Soft: c.Soft, Upsert: c.Upsert}
	switch {
	case spec.payload != nil:
		w.Row = spec.payload(ptr)
	case c.Op != ChangeDeleted || c.loaded:
		w.Row = ptr
	}
	payload, err := json.Marshal(w)
	if err != nil {
		return Event{}, false, invalid("Payload", "of a tracked %s: %v", spec.name, err)
	}
	e := Event{
		Type:          spec.types[c.Op],
		AggregateType: spec.name,
		AggregateID:   id,
		PartitionKey:  spec.name + ":" + id,
		Topic:         spec.topic,
		Version:       spec.version,
		Payload:       json.RawMessage(payload),
	}
	if spec.partition != nil {
		e.PartitionKey = spec.partition(ptr)
	}
	if spec.tenant != nil {
		e.TenantID = spec.tenant(ptr)
	}
	return e, true, nil
}

// rowPointer returns a *T for the model struct v (a copy when v is not
// addressable).
func rowPointer(v reflect.Value) any {
	if v.CanAddr() {
		return v.Addr().Interface()
	}
	p := reflect.New(v.Type())
	p.Elem().Set(v)
	return p.Interface()
}
