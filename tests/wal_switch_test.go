package tests

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/oteltest"
	"github.com/gormoutbox/outbox/relay"
	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// Switching modes loses nothing, both ways. Table mode to WAL mode: events
// committed as rows before the slot existed, then events committed as
// messages, are all delivered once by a WAL mode relay, each key in
// commit order (a key's messages wait behind its rows). WAL mode back to
// table mode: messages the slot still holds when the writers switch to
// rows (WAL.Drain) are streamed, the rows claimed, all delivered once;
// then the slot is dropped and table mode goes on alone.
func TestWALModeSwitch(t *testing.T) {
	t.Parallel()
	start := time.Now()
	d := &database{dialect: workload.Postgres}
	d.pg = startPostgresWAL(t)
	d.dsn = d.pg.DSN()
	tableDB := open(t, workload.Postgres, d.dsn)
	d.db = tableDB
	if err := workload.Setup(t.Context(), tableDB); err != nil {
		t.Fatal(err)
	}
	shape := workload.WriterConfig{Writers: 2, KeySeq: true, Keys: 8, Limit: 400}
	write := func(db *gorm.DB) { w := workload.StartWriters(db, shape); <-w.Done(); w.Stop() }

	write(tableDB) // rows, before WAL mode exists
	walDB, err := workload.OpenWALDB(d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	write(walDB) // messages
	relays := startFleet(t, walDB, walRelayConfig(d), 1, 0)
	walFinish(t, walDB, relays, nil, ending{scenario: "table mode to WAL mode", transport: workload.Inproc,
		expect: workload.Expect{Ordered: true}, start: start, lastFault: start})

	// Back: messages the slot holds, then rows written in Drain mode.
	write(walDB)
	drainDB, err := workload.OpenDBWith(workload.Postgres, d.dsn, &outbox.Plugin{WAL: &outbox.WAL{Drain: true}})
	if err != nil {
		t.Fatal(err)
	}
	write(drainDB)
	if n := tableRows(t, d); n < 400 {
		t.Errorf("Drain mode wrote %d rows, want 400 at least", n)
	}
	relays = startFleet(t, drainDB, walRelayConfig(d), 1, 0)
	walFinish(t, drainDB, relays, nil, ending{scenario: "WAL mode back to table mode", transport: workload.Inproc,
		start: start, lastFault: start})
	if err := outbox.DropWAL(t.Context(), tableDB, outbox.WAL{}); err != nil {
		t.Fatal(err)
	}
	write(tableDB)
	relays = startFleet(t, tableDB, workload.RelayConfig{Dialect: workload.Postgres, DSN: d.dsn}, 1, 0)
	walFinish(t, tableDB, relays, nil, ending{scenario: "table mode again", transport: workload.Inproc, start: start, lastFault: start})
	if _, err := workload.OpenDBWith(workload.Postgres, d.dsn, &outbox.Plugin{WAL: &outbox.WAL{}}); !errors.Is(err, outbox.ErrWALNotReady) {
		t.Errorf("db.Use in WAL mode after the slot was dropped: %v, want ErrWALNotReady", err)
	}
}

// WAL mode: a relay whose publisher is down holds the slot back while
// events keep coming and other writes fill the WAL past
// max_slot_wal_keep_size (1MB here): the server invalidates the slot. The
// relay detects it, logs it and Start returns ErrWALSlotLost, rather than
// going on silently; db.Use refuses the slot, naming the fix.
func TestWALSlotInvalidated(t *testing.T) {
	t.Parallel()
	d := startWALDatabase(t, "-c", "max_slot_wal_keep_size=1MB")
	down := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
		return outbox.Unavailable(errors.New("broker down"))
	})
	r, err := relay.New(d.db, down, relay.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { done <- r.Start(ctx) }()
	if err := workload.Fill(d.db, 100, workload.WriterConfig{}); err != nil {
		t.Fatal(err)
	}
	d.pg.Exec(t, `CREATE TABLE filler (x text)`)
	var status string
	for i := 0; i < 10 && status != "lost"; i++ {
		d.pg.Exec(t, `INSERT INTO filler SELECT repeat('x', 1000) FROM generate_series(1, 20000)`, `CHECKPOINT`)
		if err := d.db.Raw(`SELECT COALESCE(wal_status, '') FROM pg_replication_slots WHERE slot_name = 'outbox_events_wal'`).Scan(&status).Error; err != nil {
			t.Fatal(err)
		}
	}
	if status != "lost" {
		t.Fatalf("the slot's wal_status is %q after filling the WAL; want lost", status)
	}
	select {
	case err := <-done:
		if !errors.Is(err, relay.ErrWALSlotLost) || !errors.Is(err, outbox.ErrWALNotReady) {
			t.Errorf("Start returned %v, want ErrWALSlotLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not stop within 30s of its slot's invalidation")
	}
	checkWALStats(t, d, func(s *relay.WALStats) string {
		if s.Status != "lost" || !strings.Contains(s.Warning, "invalidated") {
			return "want wal_status lost, and a warning that says so"
		}
		return ""
	})
	_, err = workload.OpenWALDB(d.dsn)
	if !errors.Is(err, outbox.ErrWALNotReady) {
		t.Errorf("db.Use with an invalidated slot: %v, want ErrWALNotReady", err)
	}
}

// WAL mode: a publisher down for longer than WithWALSpillAfter (1 s here)
// no longer holds the slot back: the stream's events move into the table
// as pending (no attempt spent), the slot confirms past them, and once the
// publisher is back the relay delivers every event once, each key in
// commit order.
func TestWALOutageSpillsToTheTable(t *testing.T) {
	t.Parallel()
	d := startWALDatabase(t)
	var down atomic.Bool
	down.Store(true)
	var mu sync.Mutex
	seen := map[string]int{}
	var order []string
	pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
		if down.Load() {
			return outbox.Unavailable(errors.New("broker down"))
		}
		mu.Lock()
		defer mu.Unlock()
		if seen[e.ID]++; seen[e.ID] == 1 {
			order = append(order, e.PartitionKey+"/"+e.AggregateID)
		}
		return nil
	})
	mp := oteltest.NewMeterProvider()
	r, err := relay.New(d.db, pub, relay.WithWALSpillAfter(time.Second), relay.WithPollInterval(50*time.Millisecond), relay.WithMeterProvider(mp),
		relay.WithBackoff(func(int) time.Duration { return 100 * time.Millisecond }), relay.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	defer func() { cancel(); <-done }()
	const n = 300
	for i := range n {
		ev := outbox.Event{Type: "outage.test", PartitionKey: fmt.Sprintf("k%d", i%4), AggregateID: fmt.Sprintf("%04d", i)}
		if err := d.db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, ev) }); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, func() bool { return tableRows(t, d) == n })
	checkWALStats(t, d, func(s *relay.WALStats) string {
		if s.OldestUnconfirmedAge > 10*time.Second {
			return "want the slot confirmed past the events moved into the table"
		}
		return ""
	})
	time.Sleep(1500 * time.Millisecond) // the streamer reads the slot's lag every second
	checkWALMetrics(t, mp, n)
	down.Store(false)
	waitFor(t, 60*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(order) == n })
	mu.Lock()
	defer mu.Unlock()
	last := map[string]string{}
	for _, o := range order {
		key, agg, _ := strings.Cut(o, "/")
		if agg < last[key] {
			t.Errorf("key %s: %s delivered after %s", key, agg, last[key])
		}
		last[key] = agg
	}
	for id, c := range seen {
		if c > 1 {
			t.Errorf("event %s delivered %d times", id, c)
		}
	}
}

// checkWALMetrics checks WAL mode's metrics: spilled events counted by
// status, the slot's lag and the oldest unconfirmed commit's age observed
// while a relay streams.
func checkWALMetrics(t *testing.T, mp *oteltest.MeterProvider, spilled int) {
	t.Helper()
	m, err := mp.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got := m["outbox.wal.events.spilled"].Total(); got < float64(spilled) {
		t.Errorf("outbox.wal.events.spilled = %v, want %d at least", got, spilled)
	}
	for _, name := range []string{"outbox.wal.slot.lag", "outbox.wal.oldest_unconfirmed_age"} {
		if len(m[name].Points) == 0 {
			t.Errorf("%s was not observed while the relay streamed (metrics %v)", name, m.Names())
		}
	}
	if lag := m["outbox.wal.slot.lag"].Total(); lag < 0 || lag > 16<<20 {
		t.Errorf("outbox.wal.slot.lag = %v bytes, want a small lag once the events moved into the table", lag)
	}
}
