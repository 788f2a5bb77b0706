package tests

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// held returns the ids of the events the relay process holds (publishing,
// locked by one of its worker ids).
func held(t *testing.T, db *gorm.DB, name string) []int64 {
	t.Helper()
	var ids []int64
	if err := db.Raw(`SELECT id FROM outbox_events WHERE status = 'publishing' AND locked_by LIKE ?`, name+"-%").Scan(&ids).Error; err != nil {
		t.Fatal(err)
	}
	return ids
}

// freezeHolding stops (SIGSTOP) the relay process at a moment it holds a
// batch, and returns the events it holds.
func freezeHolding(t *testing.T, db *gorm.DB, p *workload.RelayProc) []int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if len(held(t, db, p.Name)) == 0 {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if err := p.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		// A statement it sent before it stopped may still complete.
		time.Sleep(500 * time.Millisecond)
		if ids := held(t, db, p.Name); len(ids) > 0 {
			return ids
		}
		_ = p.Signal(syscall.SIGCONT)
	}
	t.Fatalf("relay %s never held a batch", p.Name)
	return nil
}

// Scenario 3: a relay process is frozen (SIGSTOP, as by a GC pause or a VM
// migration) while it holds a batch, for longer than its lease; another
// relay takes its events over; the frozen one resumes (SIGCONT). Its
// completions are refused (logged as lost) or found past their lease, every
// effect happens once, and it goes on delivering.
func TestRelayFrozen(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{workload.Postgres, workload.MySQL, workload.SQLite} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, dialect)
			cfg := workload.RelayConfig{Dialect: dialect, DSN: d.dsn, Lease: 3 * time.Second,
				Behavior: workload.Behavior{Work: 20 * time.Millisecond}}
			nIn := 2
			if dialect == workload.SQLite {
				nIn = 1 // with the frozen one, two relays on one SQLite file
			}
			relays := startFleet(t, d.db, cfg, nIn, 1)
			frozen := relays.procs[0]
			w := workload.StartWriters(d.db, workload.WriterConfig{Pause: 10 * time.Millisecond})
			pause(2 * time.Second)
			ids := freezeHolding(t, d.db, frozen)
			pause(cfg.Lease + 3*time.Second) // past the lease: another relay takes over
			if err := frozen.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			lastFault := time.Now()
			pause(3 * time.Second)
			rep := finish(t, d.db, relays, w, ending{scenario: "relay frozen past its lease", dialect: dialect, transport: workload.Inproc,
				faults: fmt.Sprintf("SIGSTOP for %v holding %d events", cfg.Lease+3*time.Second, len(ids)),
				expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault})
			_ = rep
			// Every event it held was claimed again (by another relay, or by
			// itself after its lease was rescued).
			var reclaimed int64
			if err := d.db.Raw(`SELECT COUNT(*) FROM outbox_events WHERE id IN ? AND claim_version > 1`, ids).Scan(&reclaimed).Error; err != nil {
				t.Fatal(err)
			}
			if int(reclaimed) != len(ids) {
				t.Errorf("%d of the %d events held by the frozen relay were claimed again", reclaimed, len(ids))
			}
			// Once it resumed, the frozen relay knew it had not recorded the
			// batch: its completion was refused by the fence, or (when the
			// freeze caught the completion in flight, its deadline passed
			// meanwhile) it ran out of lease and kept the outcomes for its
			// rescue, which finds the events taken over, or (when it froze
			// while delivering) it gave up the deliveries that had not
			// returned by the end of their lease.
			log, _ := os.ReadFile(frozen.Log())
			refused := strings.Count(string(log), "took events over (their lease had expired) before their completion") +
				strings.Count(string(log), "before their late outcomes were recorded") +
				strings.Count(string(log), "deliveries did not return by the end of their lease")
			expired := strings.Count(string(log), "outcomes failed within its lease")
			if refused+expired == 0 {
				t.Errorf("the frozen relay logged neither a refused completion nor one past its lease; its log:\n%s", log)
			} else {
				t.Logf("the frozen relay's completions: %d refused, %d past the lease", refused, expired)
			}
		})
	}
}
