package tests

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// Scenario 6a: a handler slower than the lease (2% of the events take the
// lease plus two seconds on their first attempt, ignoring their context).
// Their lease expires, another relay delivers them again while the first
// handler still runs: every effect happens once, nothing goes dead, and
// each key's effects keep their commit order. On SQLite the slow handler
// holds the database's only write lock for its whole run (its effect's
// transaction is open), so every other delivery waits: fewer events there.
func TestHandlerSlowerThanLease(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{workload.Postgres, workload.MySQL, workload.SQLite} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, dialect)
			lease := 5 * time.Second
			cfg := workload.RelayConfig{Dialect: dialect, DSN: d.dsn, Lease: lease,
				Behavior: workload.Behavior{SlowPercent: 2, Slow: lease + 2*time.Second}}
			nIn, nSub, events := 2, 1, 200
			if dialect == workload.SQLite {
				nIn, nSub, events = 1, 0, 100
			}
			relays := startFleet(t, d.db, cfg, nIn, nSub)
			w := workload.StartWriters(d.db, workload.WriterConfig{Pause: 20 * time.Millisecond, Limit: events})
			// The writers' ids are random, so 2% of them may be none: three
			// events certain to be slow, keyed, with a follower each.
			var slow []*workload.Order
			for len(slow) < 6 {
				id := uuid.NewString()
				if workload.Chosen(id, cfg.Behavior.SlowPercent) {
					key := fmt.Sprintf("slow-%d", len(slow))
					slow = append(slow, &workload.Order{EventID: id, PartitionKey: key}, &workload.Order{PartitionKey: key})
				}
			}
			if err := workload.Commit(d.db, slow...); err != nil {
				t.Fatal(err)
			}
			<-w.Done()
			lastFault := time.Now()
			rep := finish(t, d.db, relays, w, ending{scenario: "handler slower than the lease", dialect: dialect, transport: workload.Inproc,
				faults: fmt.Sprintf("2%% of first attempts take %v (lease %v)", lease+2*time.Second, lease),
				expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault})
			if rep.MaxAttempts < 2 {
				t.Errorf("no event was delivered twice: the slow handlers did not outlive their lease")
			}
		})
	}
}

// Scenario 6b: a poison event whose handler crashes the relay process
// (os.Exit) every time. Each crash leaves the event claimed until its
// lease expires; it goes dead after exactly its MaxAttempts (3) claims,
// with as many crashes, while the other events, those of its key after it
// included, are delivered.
func TestPoisonEventCrashesRelays(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{workload.Postgres, workload.MySQL, workload.SQLite} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, dialect)
			poison := "poison-" + uuid.NewString()
			cfg := workload.RelayConfig{Dialect: dialect, DSN: d.dsn, Behavior: workload.Behavior{PoisonID: poison}}
			nSub := 3
			if dialect == workload.SQLite {
				nSub = 1
			}
			// The relays start before the poison is committed: one that
			// crashed before its first heartbeat would never count as
			// started.
			relays := startFleet(t, d.db, cfg, 0, nSub)
			relays.supervise(t)
			w := workload.StartWriters(d.db, workload.WriterConfig{Pause: 20 * time.Millisecond, Limit: 200})
			// The poison and, after it, more events of its key.
			orders := []*workload.Order{{EventID: poison, PartitionKey: "k000", MaxAttempts: 3}}
			for range 5 {
				orders = append(orders, &workload.Order{PartitionKey: "k000"})
			}
			if err := workload.Commit(d.db, orders...); err != nil {
				t.Fatal(err)
			}
			<-w.Done()
			workload.WaitDrained(t, d.db, 75*time.Second, 1)
			lastFault := time.Now()
			crashes := 0
			for _, c := range relays.exitCodes() {
				if c == workload.PoisonExit {
					crashes++
				}
			}
			rep := finish(t, d.db, relays, w, ending{scenario: "poison event crashes its relay", dialect: dialect, transport: workload.Inproc,
				faults: fmt.Sprintf("%d relay crashes on the poison event", crashes),
				expect: workload.Expect{Ordered: true, Dead: []string{poison}}, start: start, lastFault: lastFault})
			if crashes != 3 {
				t.Errorf("the poison event crashed %d relays, want 3 (its MaxAttempts)", crashes)
			}
			var attempts int
			if err := d.db.Raw(`SELECT attempts FROM outbox_events WHERE event_id = ?`, poison).Scan(&attempts).Error; err != nil {
				t.Fatal(err)
			}
			if attempts != 3 {
				t.Errorf("the poison event was claimed %d times, want 3", attempts)
			}
			if rep.Dead != 1 {
				t.Errorf("%d dead events, want only the poison", rep.Dead)
			}
			var after []string
			d.db.Raw(`SELECT event_id FROM fault_effects WHERE partition_key = 'k000'`).Scan(&after)
			for _, o := range orders[1:] {
				if !slices.Contains(after, o.EventID) {
					t.Errorf("event %s of the poison's key was not delivered", o.EventID)
				}
			}
		})
	}
}
