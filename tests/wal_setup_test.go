package tests

import (
	"errors"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
)

// walAccount is an aggregate that records its events.
type walAccount struct {
	ID    uint `gorm:"primaryKey"`
	Owner string
	outbox.Recorder
}

// openPlain opens dsn without the outbox plugin, closed when t ends.
func openPlain(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// WAL mode without its slot, on a server with wal_level=logical: db.Use
// refuses, and an application that goes on with db anyway writes no event
// that no slot keeps. A test_decoding slot created beforehand sees the
// Create of a Recorder model as its business row and no logical decoding
// message (before the fix, the refused Plugin's callbacks stayed on db and
// wrote the event as a message: 1 message, lost, since the relay's slot
// did not exist).
func TestWALRefusedUseWritesNothing(t *testing.T) {
	t.Parallel()
	pg := startPostgresWAL(t)
	db := openPlain(t, pg.DSN())
	if err := db.AutoMigrate(&walAccount{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec(`SELECT pg_create_logical_replication_slot('probe', 'test_decoding')`).Error; err != nil {
		t.Fatal(err)
	}
	err := db.Use(&outbox.Plugin{WAL: &outbox.WAL{}})
	if !errors.Is(err, outbox.ErrWALNotReady) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Use in WAL mode without the slot: %v, want a refusal naming the missing slot", err)
	}
	err = db.Transaction(func(tx *gorm.DB) error {
		acc := walAccount{Owner: "ada"}
		acc.Record(outbox.Event{Type: "account.opened"})
		return tx.Create(&acc).Error
	})
	if err != nil {
		t.Fatalf("Create after the refused Use: %v", err)
	}
	var changes []string
	if err := db.Raw(`SELECT data FROM pg_logical_slot_get_changes('probe', NULL, NULL)`).Scan(&changes).Error; err != nil {
		t.Fatal(err)
	}
	messages, inserts := 0, 0
	for _, c := range changes {
		switch {
		case strings.HasPrefix(c, "message:"):
			messages++
		case strings.Contains(c, "wal_accounts: INSERT:"):
			inserts++
		}
	}
	if messages != 0 || inserts != 1 {
		t.Errorf("the Create after a refused Use wrote %d message(s) and %d row(s), want 0 and 1:\n%s",
			messages, inserts, strings.Join(changes, "\n"))
	}
}
