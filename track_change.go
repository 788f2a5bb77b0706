package outbox

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"

	"gorm.io/gorm/schema"
)

// ChangeOp is the kind of write a tracked event describes.
type ChangeOp string

// The operations Track turns into events, and the suffix of their types.
const (
	ChangeCreated ChangeOp = "created"
	ChangeUpdated ChangeOp = "updated"
	ChangeDeleted ChangeOp = "deleted"
)

// trackOps are the operations, in the order of their events' types.
var trackOps = [...]ChangeOp{ChangeCreated, ChangeUpdated, ChangeDeleted}

// Change is the payload of an event written by Track, encoded as JSON:
//
//	{"op":"updated","key":{"id":7},"row":{...},"changed":["status","updated_at"],
//	 "old":{"status":"new"},"new":{"status":"paid","updated_at":"..."}}
//
// Decode it with json.Unmarshal, and its Row with json.Unmarshal(c.Row, &order)
// when reading an event (Row is the row as written when the event is made).
type Change struct {
	// Op is what happened to the row.
	Op ChangeOp `json:"op"`
	// Key holds the primary key columns and their values.
	Key map[string]any `json:"key"`
	// Row is the row as written (the model, or what TrackPayload made of
	// it). For a delete, the row as it was, when it was loaded: always on a
	// bulk delete, and for db.Delete(&m) when m has a field other than its
	// key set. Empty otherwise.
	Row json.RawMessage `json:"row,omitempty"`
	// Columns, for an update, are the columns the statement wrote.
	Columns []string `json:"changed,omitempty"`
	// Old and New, for an update, hold the values of the written columns
	// before and after, where known: New always, except for SQL
	// expressions (gorm.Expr) on a single-row update; Old for statements
	// that read the rows first (bulk statements, TrackOldValues).
	Old map[string]any `json:"old,omitempty"`
	New map[string]any `json:"new,omitempty"`
	// Soft marks a soft delete (the model has a gorm.DeletedAt).
	Soft bool `json:"soft,omitempty"`
	// Upsert marks an event of a create with an ON CONFLICT DO UPDATE
	// clause (clause.OnConflict, the insert db.Save runs when its update
	// matched no row, associations saved with a parent): "updated" for a
	// row that existed (its key was set and the row was found, and locked,
	// before the insert), "created" otherwise.
	Upsert bool `json:"upsert,omitempty"`

	row     any               // the *T the event is about, for filters and mappers
	fields  map[string]string // Track's: the model's field names and their columns
	rowType reflect.Type      // DecodeChange's T
}

// Changed reports whether the statement wrote a column, named by its
// database name or by its field's name. In a TrackFilter the field is the
// tracked model's; on a payload decoded with DecodeChange[T], T's (its
// `gorm:"column:…"` tag, or GORM's default naming); on a Change decoded
// otherwise, the field name is turned into a column by GORM's default
// naming (Status: status, UpdatedAt: updated_at).
func (c *Change) Changed(name string) bool {
	if slices.Contains(c.Columns, name) {
		return true
	}
	column, ok := c.fields[name]
	if c.fields == nil {
		column, ok = columnOf(c.rowType, name), true
	}
	return ok && slices.Contains(c.Columns, column)
}

// columnOf returns the column of field name of struct type t (nil: any
// struct): its gorm column tag, or GORM's default naming.
func columnOf(t reflect.Type, name string) string {
	if t != nil && t.Kind() == reflect.Struct {
		if f, ok := t.FieldByName(name); ok {
			if col := schema.ParseTagSetting(f.Tag.Get("gorm"), ";")["COLUMN"]; col != "" {
				return col
			}
		}
	}
	return schema.NamingStrategy{}.ColumnName("", name)
}

// DecodeChange decodes the payload of an event written by Track, and its
// row into a T (nil when the event has no row: a delete whose row was not
// loaded). A consumer of "order.updated":
//
//	c, order, err := outbox.DecodeChange[Order](env.Payload)
//
// With TrackPayload, T is the type of what the mapper returns.
func DecodeChange[T any](payload []byte) (*Change, *T, error) {
	c := Change{rowType: reflect.TypeFor[T]()}
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, nil, fmt.Errorf("outbox: decoding a tracked change: %w", err)
	}
	if len(c.Row) == 0 || string(c.Row) == "null" {
		return &c, nil, nil
	}
	row := new(T)
	if err := json.Unmarshal(c.Row, row); err != nil {
		return &c, nil, fmt.Errorf("outbox: decoding the row of a tracked change: %w", err)
	}
	return &c, row, nil
}
