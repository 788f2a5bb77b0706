package outbox

import (
	"fmt"
	"time"

	"gorm.io/gorm"

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

// TableName returns DefaultTableName. With a custom Plugin.TableName, query
// with db.Table(name) instead.
func (OutboxEvent) TableName() string { return DefaultTableName }

// Migrate creates the outbox tables and indexes on db if they do not exist,
// by running the SQL files of package migrations for db's dialect, with the
// table name of the Plugin installed on db (DefaultTableName without one).
// It is idempotent and safe to run from several processes at once (replicas
// starting with Plugin.AutoMigrate): on PostgreSQL it runs in one
// transaction under an advisory lock, on SQLite in one transaction.
func Migrate(db *gorm.DB) error {
	table := DefaultTableName
	if p, err := Lookup(db); err == nil {
		table = p.Table()
	}
	return migrate(db, table)
}

// outboxMigrations are the files of package migrations that belong to the
// outbox table.
var outboxMigrations = []string{"0001_outbox_events", "0003_outbox_relays", "0004_outbox_claim_by_key"}

func migrate(db *gorm.DB, table string) error {
	err := sqlmigrate.Apply(db.Session(&gorm.Session{NewDB: true}), outboxMigrations, map[string]string{DefaultTableName: table})
	if err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}
