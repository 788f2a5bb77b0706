package tests

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/admin"
	"github.com/gormoutbox/outbox/relay"

	"github.com/gormoutbox/outbox/tests/internal/servers"
	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// WAL mode, end to end with in-process handlers: two relays (one streams,
// the other stands by) deliver what four writers commit, every event once,
// in its key's commit order.
func TestWALDelivers(t *testing.T) {
	t.Parallel()
	start := time.Now()
	d := startWALDatabase(t)
	relays := startFleet(t, d.db, walRelayConfig(d), 2, 0)
	w := workload.StartWriters(d.db, workload.WriterConfig{Writers: 4, KeySeq: true, Limit: 3000, Keys: 16})
	<-w.Done()
	workload.WaitDrained(t, d.db, 60*time.Second, 0)
	time.Sleep(1500 * time.Millisecond) // the streamer records its progress every second
	checkWALStats(t, d, func(s *relay.WALStats) string {
		switch {
		case !s.Active || s.Streamer == "":
			return "want a relay streaming the slot"
		case s.Status != "reserved" && s.Status != "extended":
			return "want wal_status reserved"
		case s.OldestUnconfirmedAge > 5*time.Second:
			return "want every delivered commit confirmed"
		}
		return ""
	})
	rep := walFinish(t, d.db, relays, w, ending{scenario: "WAL mode delivers", transport: workload.Inproc,
		expect: workload.Expect{Ordered: true}, start: start, lastFault: start})
	if rep.Committed < 3000 {
		t.Errorf("committed %d events, want 3000", rep.Committed)
	}
	if n := tableRows(t, d); n != 0 {
		t.Errorf("%d events went into the outbox table; every delivery succeeded, so none should", n)
	}
}

// WAL mode: the events of one key fail for two seconds. Each
// failure moves the event into the outbox table (failed, retried there
// with backoff), and the key's later events follow it into the table
// (pending) until the key has nothing unfinished left; the other keys go
// on streaming, none of their events touching the table. Every event is
// delivered once, each key in commit order.
func TestWALFailingKeySpills(t *testing.T) {
	t.Parallel()
	start := time.Now()
	d := startWALDatabase(t)
	cfg := walRelayConfig(d)
	cfg.Behavior = workload.Behavior{FailKey: "k000", FailKeyUntil: time.Now().Add(3 * time.Second)}
	relays := startFleet(t, d.db, cfg, 1, 0)
	w := workload.StartWriters(d.db, workload.WriterConfig{Writers: 4, KeySeq: true, Limit: 2000, Keys: 8, KeyedPercent: 90})
	<-w.Done()
	walFinish(t, d.db, relays, w, ending{scenario: "WAL mode, a failing key spills", transport: workload.Inproc,
		expect: workload.Expect{Ordered: true}, start: start, lastFault: start})
	var byKey []struct {
		PartitionKey string
		N            int
	}
	if err := d.db.Raw(`SELECT partition_key, COUNT(*) AS n FROM outbox_events GROUP BY partition_key`).Scan(&byKey).Error; err != nil {
		t.Fatal(err)
	}
	spilled := 0
	for _, k := range byKey {
		if k.PartitionKey != "k000" {
			t.Errorf("%d events of key %q went into the table; only the failing key's should", k.N, k.PartitionKey)
		}
		spilled += k.N
	}
	if spilled == 0 {
		t.Error("no event of the failing key went into the table")
	}
	t.Logf("%d events of the failing key went through the table", spilled)
}

// WAL mode end to end through the brokers of this module: asynq tasks and
// a Redis stream (a throw-away Redis each), handled by their consumers
// with idempotency records: every committed event has one effect. (The
// RabbitMQ and NATS publishers, modules of their own, are tested the same
// way in the module tests/walbrokers.)
func TestWALBrokers(t *testing.T) {
	t.Parallel()
	for _, transport := range []string{workload.Asynq, workload.Stream} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startWALDatabase(t)
			rs := servers.StartRedis(t, servers.NoPersistence)
			cons := startConsumers(t, transport, d, rs.Addr())
			cfg := walRelayConfig(d)
			cfg.Transport, cfg.RedisAddr = transport, rs.Addr()
			relays := startFleet(t, d.db, cfg, 1, 1)
			w := workload.StartWriters(d.db, workload.WriterConfig{Writers: 4, KeySeq: true, Limit: 1500})
			<-w.Done()
			walFinish(t, d.db, relays, w, ending{scenario: "WAL mode through " + transport, transport: transport,
				start: start, lastFault: start, consumers: cons})
			cons.Stop()
		})
	}
}

// checkWALStats reads the slot's health as outbox stats and the admin page
// show it, and fails t unless want holds for it.
func checkWALStats(t *testing.T, d *database, want func(*relay.WALStats) string) *relay.WALStats {
	t.Helper()
	insp, err := relay.NewInspector(d.db)
	if err != nil {
		t.Fatal(err)
	}
	s, err := insp.GetStats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if s.WAL == nil {
		t.Fatal("GetStats reports no WAL slot")
	}
	if msg := want(s.WAL); msg != "" {
		t.Errorf("WAL stats %+v: %s", *s.WAL, msg)
	}
	h, err := admin.NewHandler(d.db)
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost/", nil))
	if body := rec.Body.String(); !strings.Contains(body, "WAL mode") || !strings.Contains(body, s.WAL.Slot) {
		t.Errorf("the admin page's overview shows no WAL section (status %d)", rec.Code)
	}
	return s.WAL
}
