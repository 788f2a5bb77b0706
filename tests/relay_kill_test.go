package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// Scenario 4: relay processes are SIGKILLed over and over (one every two
// to three seconds, each restarted a moment later) while they deliver a
// backlog and writers commit more: 6,000 events in all on PostgreSQL and
// MariaDB (four relays), 1,000 on SQLite (one relay).
// OUTBOX_FAULTS_EVENTS=20000 runs the 20,000 (several minutes with
// -race on two cores). Every committed event has exactly one effect, in its
// key's commit order; the events the killed relays held are delivered once
// their lease expires.
func TestRelaysKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dialect string
		relays  int
		events  int
	}{
		{workload.Postgres, 4, 6000},
		{workload.MySQL, 4, 6000},
		{workload.SQLite, 1, 1000},
	} {
		if n, err := strconv.Atoi(os.Getenv("OUTBOX_FAULTS_EVENTS")); err == nil && n > 0 {
			tc.events = n
		}
		t.Run(tc.dialect, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, tc.dialect)
			shape := workload.WriterConfig{Writers: 2, PerTx: 10, Keys: 256, Pause: 5 * time.Millisecond, Limit: tc.events / 2}
			if err := workload.Fill(d.db, tc.events/2, shape); err != nil {
				t.Fatal(err)
			}
			cfg := workload.RelayConfig{Dialect: tc.dialect, DSN: d.dsn, Batch: 50}
			relays := startFleet(t, d.db, cfg, 0, tc.relays)
			relays.supervise(t)
			w := workload.StartWriters(d.db, shape)
			// Kill one relay every 2-3s while the writers run, and for 15s
			// at least.
			kills := 0
			killing := time.Now()
			writing := w.Done()
			for writing != nil || time.Since(killing) < 15*time.Second {
				select {
				case <-writing:
					writing = nil
				case <-time.After(2*time.Second + rand.N(time.Second)):
					p := relays.procs[rand.N(len(relays.procs))]
					if p.Signal(syscall.SIGKILL) == nil {
						kills++
					}
				}
			}
			// One more kill after the last commit, so that the drain starts
			// with events held by a dead relay.
			if relays.procs[0].Signal(syscall.SIGKILL) == nil {
				kills++
			}
			lastFault := time.Now()
			time.Sleep(500 * time.Millisecond) // the supervisor restarts it
			finish(t, d.db, relays, w, ending{scenario: "relays SIGKILLed repeatedly", dialect: tc.dialect, transport: workload.Inproc,
				faults: fmt.Sprintf("%d SIGKILLs of relays in %v", kills, lastFault.Sub(start).Round(time.Second)),
				expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault, drain: 120 * time.Second})
		})
	}
}
