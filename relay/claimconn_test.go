package relay_test

import (
	"context"
	"database/sql"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testdb"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// On PostgreSQL a running relay keeps one connection for its claims, out
// of the pool's rotation (the test's own statements never land on it).
// When that connection dies (here terminated by the server), the next
// claim fails, the relay takes another connection, and events keep
// flowing; once Start returns, the connection is back in the pool.
func TestClaimConnectionIsReplacedWhenItDies(t *testing.T) {
	// The test's connections carry a name of their own, so that it
	// terminates its relay's claim connection and no other test's (they
	// share the database, each in its own schema).
	app := testenv.Name("claimconn")
	db := testdb.Open(t, testdb.Postgres, withApplicationName(testenv.DSN(t, testenv.Postgres), app), testenv.Config())
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	rec := newRecorder()
	r := newRelay(t, db, rec, relay.WithPollInterval(20*time.Millisecond))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- r.Start(ctx) }()
	waitDelivered := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for rec.delivered() < n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if got := rec.delivered(); got < n {
			t.Fatalf("%d deliveries, want %d", got, n)
		}
	}
	emitN(t, db, 1, event)
	waitDelivered(1)

	// The claim connection is the idle one whose last statement was the
	// claim (the pool's other connections ran other statements last).
	var killed []bool
	deadline := time.Now().Add(5 * time.Second)
	for len(killed) == 0 && time.Now().Before(deadline) {
		must(t, db.Raw(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = ? AND pid <> pg_backend_pid()
			AND state = 'idle' AND query LIKE 'WITH RECURSIVE%'`, app).Scan(&killed).Error)
		time.Sleep(5 * time.Millisecond)
	}
	if len(killed) != 1 {
		t.Fatalf("terminated %d claim connections, want 1", len(killed))
	}
	emitN(t, db, 3, func(i int) outbox.Event { return event(i + 1) })
	waitDelivered(4)

	cancel()
	must(t, <-errc)
	sqlDB, err := db.DB()
	must(t, err)
	if inUse := sqlDB.Stats().InUse; inUse != 0 {
		t.Errorf("%d connections still in use after Start returned, want 0", inUse)
	}
	// The claim connection's setting (a generic plan at once) was reset
	// before it went back: every idle connection has the default.
	conns := make([]*sql.Conn, sqlDB.Stats().Idle)
	for i := range conns {
		conns[i], err = sqlDB.Conn(t.Context())
		must(t, err)
		var mode string
		must(t, conns[i].QueryRowContext(t.Context(), "SHOW plan_cache_mode").Scan(&mode))
		if mode != "auto" {
			t.Errorf("a pooled connection has plan_cache_mode %q, want auto", mode)
		}
	}
	for _, c := range conns {
		must(t, c.Close())
	}
}

// withApplicationName adds application_name to a PostgreSQL URL or
// key=value DSN.
func withApplicationName(dsn, name string) string {
	if strings.Contains(dsn, "://") {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		return dsn + sep + "application_name=" + url.QueryEscape(name)
	}
	return dsn + " application_name=" + name
}
