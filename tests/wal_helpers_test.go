package tests

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/tests/internal/servers"
	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// walServerArgs are the settings of a throw-away PostgreSQL for WAL mode.
func walServerArgs(extra ...string) servers.Option {
	args := []string{"-c", "wal_level=logical", "-c", "max_wal_senders=20", "-c", "max_replication_slots=20",
		"-c", "wal_sender_timeout=10s"}
	return servers.WithArgs(append(args, extra...)...)
}

// startPostgresWAL starts a throw-away PostgreSQL with wal_level=logical.
func startPostgresWAL(t *testing.T, extra ...string) *servers.Postgres {
	t.Helper()
	return servers.StartPostgres(t, walServerArgs(extra...))
}

// testLogger logs to t at warn level and above.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testLogWriter struct{ t *testing.T }

func (w testLogWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startWALDatabase starts a throw-away PostgreSQL with wal_level=logical
// (extra: more -c settings) and opens it in WAL mode, migrated: the slot
// exists.
func startWALDatabase(t *testing.T, extra ...string) *database {
	t.Helper()
	d := &database{dialect: workload.Postgres}
	d.pg = servers.StartPostgres(t, walServerArgs(extra...))
	d.dsn = d.pg.DSN()
	db, err := workload.OpenWALDB(d.dsn)
	if err != nil {
		t.Fatalf("opening in WAL mode: %v", err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	d.db = db
	if err := workload.Setup(t.Context(), d.db); err != nil {
		t.Fatal(err)
	}
	return d
}

// walRelayConfig is a relay of a WAL mode database.
func walRelayConfig(d *database) workload.RelayConfig {
	return workload.RelayConfig{Dialect: workload.Postgres, DSN: d.dsn, WAL: true}
}

// walFinish stops the writers, waits for every committed event's effect,
// checks the guarantees (per-key order by KeySeq), stops the relays and
// logs the summary line. Unlike finish it probes no relay: in WAL mode
// one relay streams and the others stand by.
func walFinish(t *testing.T, db *gorm.DB, relays *fleet, w *workload.Writers, e ending) workload.Report {
	t.Helper()
	faults := drainAfterWriters(t, db, w, e)
	e.expect.WAL = true
	rep := workload.Check(t, db, e.expect)
	if relays != nil {
		relays.stop(t)
	}
	n := 0
	if relays != nil {
		n = relays.size()
	}
	workload.Summary{Scenario: e.scenario, Dialect: "postgres (WAL mode)", Transport: e.transport, Relays: n, Faults: faults,
		Report: rep, Recover: time.Since(e.lastFault), Total: time.Since(e.start)}.Log(t)
	return rep
}

// tableRows counts the rows of the outbox table.
func tableRows(t *testing.T, d *database) int {
	t.Helper()
	var n int64
	if err := d.db.Raw(`SELECT COUNT(*) FROM outbox_events`).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	return int(n)
}
