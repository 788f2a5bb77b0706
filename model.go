package outbox

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/sqlmigrate"
)

// DefaultTableName is the table the outbox uses unless Plugin.TableName says
// otherwise.
const DefaultTableName = "outbox_events"

// Status is the delivery state of an outbox row; its values are what the
// status column stores.
type Status string

// The states of an outbox row. An emitted event starts pending; a relay
// claims it (publishing) and then marks it published, failed (scheduled for
// another attempt) or dead (no more attempts; only a replay revives it).
const (
	StatusPending    Status = "pending"
	StatusPublishing Status = "publishing"
	StatusPublished  Status = "published"
	StatusFailed     Status = "failed"
	StatusDead       Status = "dead"
)

// Valid reports whether s is one of the five statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusPublishing, StatusPublished, StatusFailed, StatusDead:
		return true
	}
	return false
}

// OutboxEvent is one row of the outbox table. Applications write rows with
// Emit or Recorder, not by creating OutboxEvent values; the type is exported
// for reading (operations, tests) and for the relay.
//
// The schema is created by Migrate or by the SQL files under migrations/;
// the gorm tags describe the same columns for reading and for AutoMigrate,
// but only those two create the claim and key-order indexes.
type OutboxEvent struct {
	// ID is the auto-increment key: claim order, and the order of events
	// within a partition key.
	ID int64 `gorm:"column:id;primaryKey;autoIncrement"`
	// EventID is the event's unique id (Event.ID), the dedupe key.
	EventID       string `gorm:"column:event_id;size:128;not null;uniqueIndex"`
	Type          string `gorm:"column:type;size:255;not null"`
	Version       int    `gorm:"column:version;not null;default:1"`
	TenantID      string `gorm:"column:tenant_id;size:128;not null;default:''"`
	AggregateType string `gorm:"column:aggregate_type;size:128;not null;default:''"`
	AggregateID   string `gorm:"column:aggregate_id;size:255;not null;default:''"`
	PartitionKey  string `gorm:"column:partition_key;size:255;not null;default:''"`
	Topic         string `gorm:"column:topic;size:255;not null;default:''"`
	// Payload holds the bytes delivered to consumers (usually JSON).
	Payload []byte `gorm:"column:payload"`
	// Headers holds a JSON object of string values, or NULL.
	Headers []byte `gorm:"column:headers"`
	Status  Status `gorm:"column:status;size:16;not null;default:pending"`
	// Attempts counts delivery attempts; a claim spends one, a release
	// (Unavailable, shutdown) gives it back.
	Attempts int `gorm:"column:attempts;not null;default:0"`
	// MaxAttempts is the event's own limit; 0 means the relay's default.
	MaxAttempts int       `gorm:"column:max_attempts;not null;default:0"`
	AvailableAt time.Time `gorm:"column:available_at;not null"`
	// ClaimVersion is bumped by every claim: the fencing token.
	ClaimVersion int64      `gorm:"column:claim_version;not null;default:0"`
	LockedBy     *string    `gorm:"column:locked_by;size:128"`
	LockedUntil  *time.Time `gorm:"column:locked_until"`
	LastError    *string    `gorm:"column:last_error"`
	PublishedAt  *time.Time `gorm:"column:published_at"`
	CreatedAt    time.Time  `gorm:"column:created_at;not null;autoCreateTime:false"`
}

// TableName returns DefaultTableName: GORM asks it once per type, and
// cannot ask the db. With a custom Plugin.TableName, name the table of each
// statement: db.Table(plugin.Table()). A statement on OutboxEvent that does
// not, on a db whose Plugin has another table, fails with an error
// wrapping ErrInvalidConfig instead of reading or writing DefaultTableName.
func (OutboxEvent) TableName() string { return DefaultTableName }

// cbTableCheck names the callbacks of checkTable.
const cbTableCheck = "outbox:table_check"

// registerTableCheck makes statements on OutboxEvent that name no table
// fail on a db whose Plugin has a table other than DefaultTableName
// (OutboxEvent.TableName cannot follow it). With the default table it
// registers nothing.
func (p *Plugin) registerTableCheck(db *gorm.DB) error {
	if p.Table() == DefaultTableName {
		return nil
	}
	cb := db.Callback()
	return errors.Join(
		cb.Query().Before("gorm:query").Register(cbTableCheck, p.checkTable),
		cb.Row().Before("gorm:row").Register(cbTableCheck, p.checkTable),
		cb.Create().Before("gorm:begin_transaction").Register(cbTableCheck, p.checkTable),
		cb.Update().Before("gorm:begin_transaction").Register(cbTableCheck, p.checkTable),
		cb.Delete().Before("gorm:begin_transaction").Register(cbTableCheck, p.checkTable),
	)
}

var outboxEventType = reflect.TypeFor[OutboxEvent]()

// checkTable fails a statement whose model is OutboxEvent and whose table
// comes from OutboxEvent.TableName (no db.Table, no raw SQL).
func (p *Plugin) checkTable(db *gorm.DB) {
	st := db.Statement
	if db.Error != nil || st.Schema == nil || st.Schema.ModelType != outboxEventType ||
		st.TableExpr != nil || st.SQL.Len() > 0 || st.Table != DefaultTableName {
		return
	}
	_ = db.AddError(fmt.Errorf("%w: OutboxEvent names the table %s, but the outbox table of this db is %s (Plugin.TableName): use db.Table(%q)",
		ErrInvalidConfig, DefaultTableName, p.Table(), p.Table()))
}

// AfterFind is a GORM hook: it makes the times of a row read with Find,
// First or Take the instants the library stored, whatever the database
// driver's zone. MySQL's DATETIME has no zone: the library stores UTC,
// while the driver reads the wall clock in its loc (loc=Local is common).
// Rows scanned with Raw(…).Scan or into another type do not pass through
// it.
func (e *OutboxEvent) AfterFind(tx *gorm.DB) error {
	k, err := dialect.Of(tx)
	if err != nil {
		return nil
	}
	e.AvailableAt, e.CreatedAt = k.StoredTime(e.AvailableAt), k.StoredTime(e.CreatedAt)
	e.LockedUntil, e.PublishedAt = k.StoredTimePtr(e.LockedUntil), k.StoredTimePtr(e.PublishedAt)
	return nil
}

// ErrNotMigrated is wrapped by the errors of constructors (relay.New,
// idempotency.NewStore) that found a table they use missing, and by the
// error of a write (Emit, a Recorder's or Track's statement) whose INSERT
// found the outbox table missing: run outbox.Migrate (or the CLI's
// `outbox migrate`, or the SQL files of package migrations) first. The
// write path reads this from the failed statement's error, never with a
// check of its own.
var ErrNotMigrated = errors.New("outbox: not migrated")

// Migrate creates, if they do not exist, every table the library uses
// with its indexes: the outbox table (the table name of the Plugin
// installed on db, DefaultTableName without one), its relays (heartbeats)
// table, on MySQL its partition-key table, and the idempotency records of
// package idempotency under their default name (idempotency.Migrate
// creates a table of another name). It runs the SQL files of package
// migrations for db's dialect, each once (see package migrations).
//
// Run it (or the CLI's `outbox migrate`, or the SQL files with a
// migration tool) before relay.New and idempotency.NewStore, which refuse
// a database without their tables (ErrNotMigrated). It is idempotent and
// safe to run from several processes at once (replicas starting with
// Plugin.AutoMigrate): on PostgreSQL it runs in one transaction under an
// advisory lock, on MySQL under a named lock, on SQLite in one
// transaction.
//
// With a Plugin in WAL mode (Plugin.WAL) installed on db, it then sets up
// the replication slot and its publication (MigrateWAL). db.Use refuses a
// Plugin in WAL mode until they exist, and a refused Plugin is not
// installed: set them up before db.Use, with the Plugin's Migrate method
// (or Plugin.AutoMigrate, or `outbox migrate --wal`).
func Migrate(db *gorm.DB) error {
	if p, err := Lookup(db); err == nil {
		return p.Migrate(db)
	}
	return migrate(db, DefaultTableName)
}

// Migrate creates on db what p needs, whether or not p is installed on db
// (p's Use may even have been refused): Migrate's tables for p's
// TableName and, in WAL mode (WAL set, not Drain), MigrateWAL's slot,
// publication and status table for them. In WAL mode, call it before
// db.Use(p), which refuses a server without the slot; Plugin.AutoMigrate
// makes Use call it. Bad settings (TableName, WAL's names, WAL mode on
// another database than PostgreSQL) are refused before any statement, as
// Use refuses them.
func (p *Plugin) Migrate(db *gorm.DB) error {
	table, err := validTableName(p.TableName)
	if err != nil {
		return err
	}
	kind, err := dialect.Of(db)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	if err := checkWALConfig(p.WAL, kind, table); err != nil {
		return err
	}
	if err := migrate(db, table); err != nil {
		return err
	}
	if p.WAL == nil || p.WAL.Drain {
		return nil
	}
	return migrateWAL(db, table, *p.WAL)
}

// outboxMigrations are the files of package migrations that belong to the
// outbox table, idempotencyMigrations those of the idempotency table.
var (
	outboxMigrations      = []string{"0001_outbox_events", "0003_outbox_relays", "0004_outbox_relays_publisher", "0005_outbox_claim_by_key", "0006_outbox_lean_indexes", "0007_outbox_attempts", "0008_outbox_notify_inline", "0009_outbox_status_check", "0010_outbox_attempts_receipt", "0011_outbox_relays_rescued"}
	idempotencyMigrations = []string{"0002_outbox_idempotency"}
)

// idempotencyTable is idempotency.DefaultTableName (package idempotency
// imports this one).
const idempotencyTable = "outbox_idempotency"

func migrate(db *gorm.DB, table string) error {
	db = db.Session(&gorm.Session{NewDB: true})
	if err := sqlmigrate.Apply(db, outboxMigrations, map[string]string{DefaultTableName: table}); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	if err := sqlmigrate.Apply(db, idempotencyMigrations, map[string]string{idempotencyTable: idempotencyTable}); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}
