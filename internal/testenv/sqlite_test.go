package testenv_test

import (
	"context"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// A shared in-memory DSN (mode=memory&cache=shared, as the examples use)
// names one database for every connection of the pool, with the cgo driver
// and with the pure-Go one (CGO_ENABLED=0): a relay's claims, heartbeats
// and the writer's transactions run on different connections and must see
// the same tables.
func TestSharedMemoryDatabaseIsShared(t *testing.T) {
	db, err := gorm.Open(testenv.SQLiteDialector("file:testenv-shared?mode=memory&cache=shared&_txlock=immediate"),
		&gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	ctx := context.Background()
	c1, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	c2, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c1.ExecContext(ctx, "CREATE TABLE t (x INTEGER)"); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.ExecContext(ctx, "INSERT INTO t VALUES (1)"); err != nil {
		t.Fatalf("a second connection does not see the first one's table (%s): %v", testenv.SQLiteDriver, err)
	}
	var n int
	if err := c1.QueryRowContext(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1 {
		t.Fatalf("the first connection counts %d rows (%v), want 1", n, err)
	}
}
