package outbox

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
)

// PluginName is the name the outbox Plugin registers under in
// gorm.Config.Plugins.
const PluginName = "gorm-outbox"

// maxTableNameLen leaves room, within PostgreSQL's 63-byte identifiers, for
// the suffixes of the index, trigger and companion-table names.
const maxTableNameLen = 48

// Plugin installs the outbox into a *gorm.DB:
//
//	if err := db.Use(&outbox.Plugin{}); err != nil { ... }
//
// Its zero value works. It registers callbacks on create, update and delete
// that write the events a statement emitted (through Emit in a model hook,
// or recorded on an aggregate with Recorder) in one multi-row INSERT,
// inside the statement's transaction, before it commits.
//
// With gorm's SkipDefaultTransaction (in gorm.Config or a Session), GORM
// runs a statement in autocommit, so that a row would commit before its
// AfterCreate hook could emit. The plugin therefore opens the transaction
// GORM skipped for every create, update and delete statement whose model
// has a GORM hook (Before/After Create, Save, Update or Delete) or has
// recorded events, and commits it (or rolls it back) after the last hook:
// such a statement is atomic with its events as without the option.
// Statements of other models run as GORM runs them.
//
// A Plugin must not be copied or shared between *gorm.DB instances after
// Use; configure it through its fields before calling Use.
type Plugin struct {
	// TableName is the outbox table (default DefaultTableName). It must be a
	// plain SQL identifier: letters, digits and underscores, not starting
	// with a digit, at most 48 characters. It is never quoted or escaped,
	// so anything else is refused by Use.
	TableName string

	// AutoMigrate makes Use create the outbox tables and indexes, and in
	// WAL mode the slot and its publication, if they do not exist yet
	// (Plugin.Migrate), before it checks the server.
	AutoMigrate bool

	// MaxPayloadSize is the largest payload accepted, in bytes as stored
	// (the JSON encoding, or the []byte given). A larger one fails with an
	// error wrapping ErrInvalidEvent naming Payload and both sizes, and
	// nothing is written. Zero means DefaultMaxPayloadSize (1 MiB);
	// NoPayloadLimit (or any negative value) means no limit.
	MaxPayloadSize int

	// Registry, when set, checks every event written (Emit, Recorder,
	// Track) against the event types and versions registered on it, and
	// refuses, with an error wrapping ErrInvalidEvent, what it does not
	// accept: nothing is written. Relays on this db check events with it
	// before publishing. Nil: no check.
	Registry *Registry

	// WAL, when set, turns on WAL mode on PostgreSQL 14 and later: events
	// are written as logical decoding messages instead of rows, and the
	// relays stream them from a replication slot (see WAL). Nil: table
	// mode, the default. Use refuses WAL mode until the slot exists: set
	// AutoMigrate, or call p.Migrate(db) (or run `outbox migrate --wal`)
	// before Use.
	WAL *WAL

	table         string
	kind          dialect.Kind
	maxPayload    int // 0: no limit
	writer        *writer
	recorderTypes sync.Map // reflect.Type -> bool: does *T embed a Recorder
	saves         saveHandoffs
	tracked       sync.Map    // reflect.Type -> *trackSpec (Track)
	trackedAny    atomic.Bool // some model is tracked
}

// Name implements gorm.Plugin.
func (p *Plugin) Name() string { return PluginName }

// Initialize implements gorm.Plugin: it validates the configuration,
// migrates with AutoMigrate, checks the server in WAL mode and, last,
// registers the callbacks. An error leaves db as it was: GORM does not
// install a plugin whose Initialize failed, and no callback of it stays on
// db to write events (in WAL mode, messages no slot would keep).
func (p *Plugin) Initialize(db *gorm.DB) error {
	if err := p.configure(db); err != nil {
		return err
	}
	if p.AutoMigrate {
		if err := p.Migrate(db); err != nil {
			return err
		}
	}
	if err := p.checkWAL(db); err != nil {
		return err
	}
	if err := errors.Join(p.registerCallbacks(db), p.registerTableCheck(db)); err != nil {
		unregisterCallbacks(db)
		return fmt.Errorf("outbox: registering callbacks: %w", err)
	}
	return nil
}

// configure validates p's settings for db and sets what they imply.
func (p *Plugin) configure(db *gorm.DB) error {
	table, err := validTableName(p.TableName)
	if err != nil {
		return err
	}
	kind, err := dialect.Of(db)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := dialect.CheckConn(db, ErrInvalidConfig); err != nil {
		return err
	}
	if p.Registry != nil && p.Registry.Err() != nil {
		return p.Registry.Err()
	}
	if err := checkWALConfig(p.WAL, kind, table); err != nil {
		return err
	}
	p.table, p.kind = table, kind
	p.writer = newWriter(kind, table)
	if p.WAL != nil && !p.WAL.Drain {
		p.writer.walPrefix = WALPrefix(table)
	}
	switch {
	case p.MaxPayloadSize == 0:
		p.maxPayload = DefaultMaxPayloadSize
	case p.MaxPayloadSize > 0:
		p.maxPayload = p.MaxPayloadSize
	}
	return nil
}

// Table returns the outbox table name in use (DefaultTableName unless
// TableName was set).
func (p *Plugin) Table() string {
	if p.table != "" {
		return p.table
	}
	if p.TableName != "" {
		return p.TableName
	}
	return DefaultTableName
}

func validTableName(name string) (string, error) {
	if name == "" {
		return DefaultTableName, nil
	}
	if err := dialect.CheckIdent(name, maxTableNameLen); err != nil {
		return "", fmt.Errorf("%w: TableName: %v", ErrInvalidConfig, err)
	}
	return name, nil
}

// Lookup returns the Plugin installed on db, or ErrNotRegistered.
func Lookup(db *gorm.DB) (*Plugin, error) {
	if db == nil || db.Config == nil {
		return nil, ErrNotRegistered
	}
	if p, ok := db.Config.Plugins[PluginName].(*Plugin); ok && p.writer != nil {
		return p, nil
	}
	return nil, ErrNotRegistered
}

const (
	cbBegin = "outbox:begin"
	cbFlush = "outbox:flush"
	cbClear = "outbox:clear"
)

// The statement kinds, for the callbacks whose work differs between them.
type op int

const (
	opCreate op = iota
	opUpdate
	opDelete
)

// callbackNames are the names of every callback the Plugin registers.
var callbackNames = []string{cbBegin, cbFlush, cbClear, cbTableCheck,
	cbTrackBeforeCreate, cbTrackCreate, cbTrackBeforeUpdate, cbTrackUpdate,
	cbTrackBeforeDelete, cbTrackDelete, cbTrackRaw}

// unregisterCallbacks removes the Plugin's callbacks from db, after one
// could not be registered: GORM keeps a callback whose registration
// failed, and runs none of its chain's callbacks (a Create would insert
// nothing) until the conflict is gone.
func unregisterCallbacks(db *gorm.DB) {
	cb := db.Callback()
	for _, chain := range []interface {
		Get(string) func(*gorm.DB)
		Remove(string) error
	}{cb.Create(), cb.Update(), cb.Delete(), cb.Query(), cb.Row(), cb.Raw()} {
		for _, name := range callbackNames {
			if chain.Get(name) != nil {
				_ = chain.Remove(name) // its error is the conflict being undone
			}
		}
	}
}

func (p *Plugin) registerCallbacks(db *gorm.DB) error {
	// Each chain: begin after GORM opens its default transaction and before
	// the first model hook; flush after the last model hook and before the
	// commit (a callback ordered only after the hooks would run after the
	// commit); end once the statement has committed or rolled back.
	create, update, del := db.Callback().Create(), db.Callback().Update(), db.Callback().Delete()
	return errors.Join(
		p.registerTrackCallbacks(db),
		create.After("gorm:begin_transaction").Before("gorm:before_create").Register(cbBegin, p.beginFor(opCreate)),
		create.After("gorm:after_create").Before("gorm:commit_or_rollback_transaction").Register(cbFlush, p.flushFor(opCreate)),
		create.After("gorm:commit_or_rollback_transaction").Register(cbClear, p.end),
		update.After("gorm:begin_transaction").Before("gorm:before_update").Register(cbBegin, p.beginFor(opUpdate)),
		update.After("gorm:after_update").Before("gorm:commit_or_rollback_transaction").Register(cbFlush, p.flushFor(opUpdate)),
		update.After("gorm:commit_or_rollback_transaction").Register(cbClear, p.end),
		del.After("gorm:begin_transaction").Before("gorm:before_delete").Register(cbBegin, p.beginFor(opDelete)),
		del.After("gorm:after_delete").Before("gorm:commit_or_rollback_transaction").Register(cbFlush, p.flushFor(opDelete)),
		del.After("gorm:commit_or_rollback_transaction").Register(cbClear, p.end),
	)
}

// mayEmit reports whether a statement may write events: its model has a
// GORM hook that will run (and could call Emit), or a Recorder with
// events, or it is the insert of a Save that was handed events.
func (p *Plugin) mayEmit(stmt *gorm.Statement, buf *statementBuffer) bool {
	if len(buf.events) > 0 || p.trackOf(stmt) != nil {
		return true
	}
	s := stmt.Schema
	if !stmt.SkipHooks && (s.BeforeCreate || s.AfterCreate || s.BeforeSave || s.AfterSave ||
		s.BeforeUpdate || s.AfterUpdate || s.BeforeDelete || s.AfterDelete) {
		return true
	}
	recorded := false
	if p.hasRecorder(stmt) {
		eachRecorder(stmt.ReflectValue, func(r *Recorder) { recorded = recorded || len(r.events) > 0 })
	}
	return recorded
}
