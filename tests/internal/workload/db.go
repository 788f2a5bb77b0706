// Package workload is what every fault scenario runs: writers that commit
// business rows with their events, relays (in this process or as
// subprocesses), handlers whose effects are written exactly once with
// idempotency records, and the checks made once the faults stop: every
// committed event has exactly one effect, nothing is left unfinished or
// dead that should not be, each partition key's effects follow its commit
// order, and every relay is still delivering.
package workload

import (
	"context"
	"fmt"
	"io"
	"log"
	"time"

	"github.com/go-sql-driver/mysql"
	mysqldriver "gorm.io/driver/mysql"
	pgdriver "gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

// Dialect names.
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
	MySQL    = "mysql"
)

// Event types of the workload.
const (
	// TypeWork is a business event: its effect is written once per event.
	TypeWork = "fault.work"
	// TypeProbe is emitted after the faults to see that each relay still
	// delivers.
	TypeProbe = "fault.probe"
)

// Order is the business row; creating one emits its event in the same
// transaction (AfterCreate).
type Order struct {
	ID           int64  `gorm:"primaryKey"`
	EventID      string `gorm:"size:64;uniqueIndex"`
	PartitionKey string `gorm:"size:64"`
	// KeySeq numbers a key's orders in commit order (WriterConfig.KeySeq).
	KeySeq      int64
	MaxAttempts int `gorm:"-"`
	CreatedAt   time.Time
}

// KeySeq is the last number given to a key's order (WriterConfig.KeySeq).
type KeySeq struct {
	Key string `gorm:"primaryKey;size:64"`
	N   int64
}

// TableName implements gorm.Tabler.
func (KeySeq) TableName() string { return "fault_key_seqs" }

// TableName implements gorm.Tabler.
func (Order) TableName() string { return "fault_orders" }

// AfterCreate emits the order's event in the order's transaction.
func (o *Order) AfterCreate(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{
		ID: o.EventID, Type: TypeWork, AggregateType: "order", AggregateID: fmt.Sprint(o.ID),
		PartitionKey: o.PartitionKey, MaxAttempts: o.MaxAttempts,
		Payload: map[string]any{"order": o.ID},
	})
}

// Effect is what a handler did for an event: exactly one per event when
// all is well.
type Effect struct {
	ID           int64  `gorm:"primaryKey"`
	EventID      string `gorm:"size:64;index"`
	PartitionKey string `gorm:"size:64"`
	Kind         string `gorm:"size:16"`
	Worker       string `gorm:"size:128"` // relay or consumer that handled it
	Attempt      int
}

// TableName implements gorm.Tabler.
func (Effect) TableName() string { return "fault_effects" }

// ProbeRecord records which relay published a probe event.
type ProbeRecord struct {
	ID      int64  `gorm:"primaryKey"`
	EventID string `gorm:"size:64"`
	Relay   string `gorm:"size:128;index"`
}

// TableName implements gorm.Tabler.
func (ProbeRecord) TableName() string { return "fault_probes" }

// SQLiteDSN returns the DSN of an SQLite file, shared by processes.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_txlock=immediate&_busy_timeout=20000&_journal_mode=WAL"
}

// QuietMySQL silences the MySQL driver's own logger (connection resets are
// what these tests inflict). It sets a global of the driver: call it once,
// before any connection is opened (TestMain).
func QuietMySQL() { _ = mysql.SetLogger(log.New(io.Discard, "", 0)) }

// OpenDB opens dsn with the outbox plugin installed and a pool sized for
// several relays and writers.
func OpenDB(dialect, dsn string) (*gorm.DB, error) { return OpenDBWith(dialect, dsn, &outbox.Plugin{}) }

// OpenWALDB opens a PostgreSQL dsn with the plugin in WAL mode (the default
// slot); Setup (Migrate) creates the slot.
func OpenWALDB(dsn string) (*gorm.DB, error) {
	return OpenDBWith(Postgres, dsn, &outbox.Plugin{WAL: &outbox.WAL{}, AutoMigrate: true})
}

// OpenDBWith opens dsn with plugin installed and a pool sized for several
// relays and writers.
func OpenDBWith(dialect, dsn string, plugin *outbox.Plugin) (*gorm.DB, error) {
	var d gorm.Dialector
	switch dialect {
	case SQLite:
		d = sqliteDialector(dsn)
	case Postgres:
		d = pgdriver.Open(dsn)
	case MySQL:
		d = mysqldriver.Open(dsn)
	default:
		return nil, fmt.Errorf("unknown dialect %q", dialect)
	}
	db, err := gorm.Open(d, &gorm.Config{Logger: logger.Default.LogMode(logger.Silent), DisableAutomaticPing: true})
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if dialect == SQLite {
		sqlDB.SetMaxOpenConns(4)
	} else {
		sqlDB.SetMaxOpenConns(40)
		sqlDB.SetMaxIdleConns(40)
	}
	if err := db.Use(plugin); err != nil {
		return nil, err
	}
	return db, nil
}

// Setup creates the outbox, idempotency and workload tables.
func Setup(ctx context.Context, db *gorm.DB) error {
	if err := outbox.Migrate(db); err != nil {
		return fmt.Errorf("migrating the outbox: %w", err)
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrating the idempotency table: %w", err)
	}
	return db.AutoMigrate(&Order{}, &Effect{}, &ProbeRecord{}, &KeySeq{})
}
