package outbox

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"
)

// ErrUntrackable is wrapped by the error of a statement on a model tracked
// with TrackStrict whose affected rows cannot be told apart (see Track).
// The statement fails and its transaction writes nothing.
var ErrUntrackable = errors.New("outbox: tracked write cannot be captured")

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
	version   int            // of the events (TrackVersion); 0: 1
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
// Tracking a model adds events and changes nothing else: a statement
// reads, locks and writes the rows it would write untracked, and returns
// the same RowsAffected and errors (track_twin_test.go runs every path
// below on a tracked and an untracked twin, on each database).
//
// Every GORM write path of the model is captured, one event per affected
// row, none when no row is affected: Create of one value, a slice or
// CreateInBatches; Save (an update, or an insert when it matched no row;
// of a slice, an upsert); Updates with a struct or a map (gorm.Expr
// values included), Update, UpdateColumn(s), with Select and Omit;
// Delete (soft: "deleted" with Change.Soft; Unscoped: hard); upserts
// (Create with clause.OnConflict: "updated" for the rows whose key was
// set and found before the insert, "created" for the others, both with
// Change.Upsert; DO NOTHING: "created" for the rows inserted only; a DO
// UPDATE with a WHERE, or with SQL expressions, which may leave a row as
// it was: "updated" only for the rows it changed, with their old and new
// values); associations saved with a parent, and rows a hook writes, when
// their model is tracked. An update or delete that does not name one row
// by its primary key (db.Model(&Order{}).Where(…), db.Delete(&Order{}, id),
// a slice, Session AllowGlobalUpdate, and a key together with a condition
// that GORM joins with OR) first reads the rows it will change, in its
// transaction, with its own WHERE (Not, nested groups, Scopes and
// subqueries included) and, where the database applies them to an UPDATE
// or DELETE (MySQL), its ORDER BY and LIMIT, locking them (SELECT … FOR
// UPDATE on PostgreSQL and MySQL; SQLite has one writer); it is then
// restricted to those rows ("(<its WHERE>) AND <key> IN (…)") and reads
// them again, locking, as it left them: so each event names its row with
// its old and new values. The rows of an upsert whose key is set are read
// plainly, and only those found are locked (a locking read of a key that
// does not exist locks a gap on MySQL).
//
// With a strict registry (Plugin.Registry), register the model's event
// types once at start-up with RegisterTracked and the same options:
//
//	outbox.RegisterTracked(reg, &Order{}) // order.created, .updated, .deleted: Change
//
// Not captured: db.Exec and db.Raw (a debug message on the TrackLogger
// names the statement, and TrackStrict refuses it), db.Table(…) without a
// model, and a Create of maps (a warning, or ErrUntrackable with
// TrackStrict). An upsert of rows whose key the database assigns, that
// conflicts on another unique column, is reported as created; so is, on
// PostgreSQL and MySQL, a row whose key another transaction inserted and
// had not committed when the upsert's rows were read, and committed
// before the upsert wrote (the upsert waits for it and then updates the
// row), and on MySQL under REPEATABLE READ one it committed after this
// transaction's snapshot: the read cannot see such a row, nor lock a key
// that does not exist yet (on MySQL that would lock the gap where it
// goes). Where two writers may upsert one new key at once, let consumers
// treat an upsert's created and updated events (Change.Upsert) alike.
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
	spec, err := newTrackSpec("Track", parse.Schema, opts)
	if err != nil {
		return err
	}
	if _, loaded := p.tracked.LoadOrStore(spec.modelType, spec); loaded {
		return fmt.Errorf("%w: Track: model %s is already tracked", ErrInvalidConfig, spec.schema.Name)
	}
	p.trackedAny.Store(true)
	return nil
}

// newTrackSpec makes the spec of model s tracked with opts (caller names
// Track or RegisterTracked in errors).
func newTrackSpec(caller string, s *schema.Schema, opts []TrackOption) (*trackSpec, error) {
	if len(s.PrimaryFields) == 0 {
		return nil, fmt.Errorf("%w: %s: model %s has no primary key", ErrInvalidConfig, caller, s.Name)
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
			return nil, fmt.Errorf("%w: %s(%s): %v", ErrInvalidConfig, caller, s.Name, err)
		}
	}
	for _, t := range spec.typed {
		if t != spec.modelType {
			return nil, fmt.Errorf("%w: %s(%s): an option is typed for %s", ErrInvalidConfig, caller, s.Name, t)
		}
	}
	for _, op := range trackOps {
		if spec.types[op] == "" {
			spec.types[op] = spec.name + "." + string(op)
		}
	}
	return spec, nil
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
