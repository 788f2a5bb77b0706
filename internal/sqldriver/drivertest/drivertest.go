// Package drivertest is the conformance suite of sqldriver.Driver: every
// dialect's driver runs Exercise against its real database, and a new
// dialect is done when Exercise passes (River's riverdrivertest is the
// model). Each test checks what a method promises, so that a driver that
// breaks the promise fails it.
package drivertest

import (
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
	"github.com/gormoutbox/outbox/internal/sqlmigrate"
	"github.com/gormoutbox/outbox/migrations"
)

// Table is the outbox table the suite's migrations create, and IdemTable
// the idempotency table.
const (
	Table     = "outbox_events"
	IdemTable = "outbox_idempotency"
)

// Exercise runs the conformance suite of drv. open returns a fresh, empty
// database of drv's dialect for each test (it may skip the test).
func Exercise(t *testing.T, drv sqldriver.Driver, open func(t *testing.T) *gorm.DB) {
	t.Helper()
	setup := func(t *testing.T) *gorm.DB {
		t.Helper()
		db := open(t)
		Migrate(t, drv, db)
		return db
	}
	t.Run("Clock", func(t *testing.T) { exerciseClock(t, drv, setup) })
	t.Run("Statements", func(t *testing.T) { exerciseStatements(t, drv, setup) })
	t.Run("Schema", func(t *testing.T) { exerciseSchema(t, drv, setup) })
	t.Run("Writer", func(t *testing.T) { exerciseWriter(t, drv, setup) })
	t.Run("Idempotency", func(t *testing.T) { exerciseIdempotency(t, drv, setup) })
	t.Run("Claimer", func(t *testing.T) { exerciseClaimer(t, drv, setup) })
	t.Run("Retention", func(t *testing.T) { exerciseRetention(t, drv, setup) })
	t.Run("KeyLocks", func(t *testing.T) { exerciseKeyLocks(t, drv, setup) })
	t.Run("RelayLocker", func(t *testing.T) { exerciseRelayLocker(t, drv, setup) })
	t.Run("AttemptLog", func(t *testing.T) { exerciseAttemptLog(t, drv, setup) })
	t.Run("Migration", func(t *testing.T) { exerciseMigration(t, drv, open) })
}

// suite is what each case of the conformance suite is given: the driver
// under test and a fresh, migrated database per case.
type suite struct {
	drv   sqldriver.Driver
	setup func(*testing.T) *gorm.DB
}

// Migrate creates the outbox and idempotency tables in db with drv and
// the files of package migrations.
func Migrate(t testing.TB, drv sqldriver.Driver, db *gorm.DB) {
	t.Helper()
	names := []string{"0001_outbox_events", "0003_outbox_relays", "0004_outbox_relays_publisher", "0005_outbox_claim_by_key", "0006_outbox_lean_indexes", "0007_outbox_attempts", "0008_outbox_notify_inline", "0009_outbox_status_check", "0010_outbox_attempts_receipt", "0011_outbox_relays_rescued"}
	must(t, sqlmigrate.ApplyDriver(db, drv, migrations.FS, names, nil))
	must(t, sqlmigrate.ApplyDriver(db, drv, migrations.FS, []string{"0002_outbox_idempotency"}, nil))
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// expr runs SELECT of the SQL expression s with args and scans the value.
func expr(t testing.TB, db *gorm.DB, dest any, s string, args ...any) {
	t.Helper()
	must(t, db.Raw("SELECT "+s, args...).Row().Scan(dest))
}

// cat joins SQL fragments and their arguments.
func cat(parts ...any) (string, []any) {
	var (
		q    string
		args []any
	)
	for i := 0; i < len(parts); i++ {
		switch p := parts[i].(type) {
		case string:
			q += p
		case []any:
			args = append(args, p...)
		default:
			panic(fmt.Sprintf("cat: %T", p))
		}
	}
	return q, args
}

// event returns a row to insert with event id id.
func event(id, key string, available *time.Time) sqldriver.EventRow {
	return sqldriver.EventRow{EventID: id, Type: "t", Version: 1, PartitionKey: key,
		Payload: []byte(`{"id":"` + id + `"}`), AvailableAt: available}
}

// insert inserts rows with drv, failing t on an error.
func insert(t testing.TB, drv sqldriver.Driver, db *gorm.DB, skip bool, rows ...sqldriver.EventRow) int64 {
	t.Helper()
	var n int64
	must(t, db.Transaction(func(tx *gorm.DB) error {
		var err error
		n, err = drv.InsertEvents(tx, sqldriver.InsertEventsParams{Table: Table, Rows: rows, SkipDuplicates: skip, Now: time.Now()})
		return err
	}))
	return n
}

// count returns the number of rows of table matching where.
func count(t testing.TB, db *gorm.DB, table, where string, args ...any) int {
	t.Helper()
	var n int
	must(t, db.Raw("SELECT COUNT(*) FROM "+table+" WHERE "+where, args...).Row().Scan(&n))
	return n
}
