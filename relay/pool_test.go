package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// A relay works with a pool of one or two connections: its LISTEN
// connection is not taken from the pool, and its other concurrent uses
// (the claim ahead, the overlapped completion, heartbeats, rescues) wait
// for a connection without holding one. It drains a backlog and stops.
func TestSmallPool(t *testing.T) {
	for _, conns := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d", conns), func(t *testing.T) {
			eachDB(t, func(t *testing.T, db *gorm.DB) {
				drainWithPool(t, db, conns)
			})
		})
	}
}

// Given an open pool of one connection (no DSN for a LISTEN connection of
// its own), a relay on PostgreSQL polls rather than take that connection.
func TestSmallPoolWithoutDSN(t *testing.T) {
	sqlDB, err := sql.Open("pgx", testenv.DSN(t, testenv.Postgres))
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), testenv.Config())
	must(t, err)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	drainWithPool(t, db, 1)
}

// drainWithPool limits db's pool to conns connections, and checks that a
// relay drains a backlog and stops.
func drainWithPool(t *testing.T, db *gorm.DB, conns int) {
	t.Helper()
	sqlDB, err := db.DB()
	must(t, err)
	sqlDB.SetMaxOpenConns(conns)
	const n = 600
	emitN(t, db, n, event)
	r := newRelay(t, db, newRecorder(), relay.WithBatchSize(50), relay.WithHeartbeat(100*time.Millisecond),
		relay.WithLease(5*time.Second), relay.WithPollInterval(100*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		qctx, qcancel := context.WithTimeout(context.Background(), 10*time.Second)
		var published int64
		err := db.WithContext(qctx).Model(&outbox.OutboxEvent{}).Where("status = ?", outbox.StatusPublished).Count(&published).Error
		qcancel()
		if err == nil && published == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d published after 60s with %d connections (%v)", published, n, conns, err)
		}
	}
	cancel()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return within 30s of its context ending")
	}
}
