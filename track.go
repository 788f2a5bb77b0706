package outbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// ErrUntrackable is wrapped by the error of a statement on a model tracked
// with TrackStrict whose affected rows cannot be told apart (see Track).
// The statement fails and its transaction writes nothing.
var ErrUntrackable = errors.New("outbox: tracked write cannot be captured")

// ChangeOp is the kind of write a tracked event describes.
type ChangeOp string

// The operations Track turns into events, and the suffix of their types.
const (
	ChangeCreated ChangeOp = "created"
	ChangeUpdated ChangeOp = "updated"
	ChangeDeleted ChangeOp = "deleted"
)

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

// trackSpec is one tracked model and its options.
type trackSpec struct {
	schema    *schema.Schema
	modelType reflect.Type      // the struct type
	fields    map[string]string // field name -> column, for Change.Changed
	name      string            // aggregate type and event type prefix
	types     map[ChangeOp]string
	ops       map[ChangeOp]bool
	topic     string
	strict    bool
	oldValues bool
	logger    *slog.Logger
	payload   func(row any) any
	key       func(row any) string
	partition func(row any) string
	tenant    func(row any) string
	filter    func(c *Change, row any) bool
	typed     []reflect.Type // the T of typed options, checked against the model
}

// Track makes every create, update and delete of model through GORM write
// an event, in the same transaction as the write, with no hook code:
//
//	outbox.Track(db, &Order{})  // order.created, order.updated, order.deleted
//
// The name (TrackName) defaults to the model's snake-case singular name
// (OrderItem: "order_item"). Each event has Type "<name>.<op>",
// AggregateType "<name>", AggregateID the primary key (a composite key as
// "col=value,col=value", values query-escaped), PartitionKey
// "<name>:<id>" so that one row's events are delivered in order, and a
// Change as its payload. Events are written through the plugin's callbacks
// (model hook methods are not needed), with the statement's other events,
// before it commits: a rollback, for any reason, leaves none. Under
// SkipDefaultTransaction the plugin opens a transaction for statements of
// tracked models, as it does for models that Emit.
//
// Every GORM write path of the model is captured, one event per affected
// row, none when no row is affected: Create of one value, a slice or
// CreateInBatches; Save (an update, or an insert when it matched no row);
// Updates with a struct or a map, Update, UpdateColumn(s); Delete (soft:
// "deleted" with Change.Soft; Unscoped: hard); upserts (Create with
// clause.OnConflict: "updated" for the rows whose key was set and found
// before the insert, "created" for the others, both with Change.Upsert;
// DO NOTHING: "created" for the rows inserted only); associations saved
// with a parent, when their model is tracked. An update or delete whose model
// value does not name one row by its primary key (db.Model(&Order{}).Where(…),
// db.Delete(&Order{}, id), a slice) first reads the rows it will change, in
// its transaction, locking them (SELECT … FOR UPDATE on PostgreSQL and
// MySQL; SQLite has one writer), and is restricted to those rows; so each
// event names its row with its old and new values.
//
// Not captured: db.Exec and db.Raw (a debug message on the TrackLogger
// names the statement, and TrackStrict refuses it), db.Table(…) without a
// model, and a Create of maps (a warning, or ErrUntrackable with
// TrackStrict). An upsert of rows whose key the database assigns, that
// conflicts on another unique column, is reported as created.
//
// A row an UPDATE matched counts as affected even when its values did not
// change, as PostgreSQL and SQLite count it; MySQL does not count it, so a
// single-row update by key that changes nothing writes no event there
// (bulk statements, whose rows are read first, count it everywhere). A bulk statement binds
// the keys of its rows: keep one under the database's bind-parameter limit
// (about 65,000 on PostgreSQL and MySQL, 32,766 on SQLite) by batching.
//
// Track returns ErrNotRegistered without the Plugin, and an error wrapping
// ErrInvalidConfig for a model without a primary key, an invalid option, or
// a model already tracked. Call it once per model at startup, before writes.
func Track(db *gorm.DB, model any, opts ...TrackOption) error {
	p, err := Lookup(db)
	if err != nil {
		return err
	}
	parse := &gorm.Statement{DB: db}
	if err := parse.Parse(model); err != nil {
		return fmt.Errorf("%w: Track: %v", ErrInvalidConfig, err)
	}
	s := parse.Schema
	if len(s.PrimaryFields) == 0 {
		return fmt.Errorf("%w: Track: model %s has no primary key", ErrInvalidConfig, s.Name)
	}
	spec := &trackSpec{
		schema:    s,
		modelType: s.ModelType,
		name:      schema.NamingStrategy{SingularTable: true}.TableName(s.Name),
		ops:       map[ChangeOp]bool{ChangeCreated: true, ChangeUpdated: true, ChangeDeleted: true},
		types:     map[ChangeOp]string{},
		logger:    slog.Default(),
		fields:    make(map[string]string, len(s.Fields)),
	}
	for _, f := range s.Fields {
		if f.DBName != "" {
			spec.fields[f.Name] = f.DBName
		}
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(spec); err != nil {
			return fmt.Errorf("%w: Track(%s): %v", ErrInvalidConfig, s.Name, err)
		}
	}
	for _, t := range spec.typed {
		if t != spec.modelType {
			return fmt.Errorf("%w: Track(%s): an option is typed for %s", ErrInvalidConfig, s.Name, t)
		}
	}
	for _, op := range []ChangeOp{ChangeCreated, ChangeUpdated, ChangeDeleted} {
		if spec.types[op] == "" {
			spec.types[op] = spec.name + "." + string(op)
		}
	}
	if _, loaded := p.tracked.LoadOrStore(spec.modelType, spec); loaded {
		return fmt.Errorf("%w: Track: model %s is already tracked", ErrInvalidConfig, s.Name)
	}
	p.trackedAny.Store(true)
	return nil
}

// trackOf returns the spec of the statement's model, or nil.
func (p *Plugin) trackOf(stmt *gorm.Statement) *trackSpec {
	if stmt.Schema == nil || !p.trackedAny.Load() {
		return nil
	}
	if v, ok := p.tracked.Load(stmt.Schema.ModelType); ok {
		return v.(*trackSpec)
	}
	return nil
}
