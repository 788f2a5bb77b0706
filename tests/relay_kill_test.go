package tests

import (
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// Scenario 4: relay processes are SIGKILLed over and over (one every two
// to three seconds, each restarted a moment later) while they deliver a
// backlog and writers commit more: 20,000 events in all (SQLite: one
// relay, 5,000 events). Every committed event has exactly one effect, in
// its key's commit order; the events the killed relays held are delivered
// once their lease expires.
func TestRelaysKilled(t *testing.T) {
	for _, tc := range []struct {
		dialect string
		relays  int
		events  int
	}{
		{workload.Postgres, 4, 20000},
		{workload.MySQL, 4, 20000},
		{workload.SQLite, 1, 5000},
	} {
		t.Run(tc.dialect, func(t *testing.T) {
			start := time.Now()
			d := startDatabase(t, tc.dialect)
			shape := workload.WriterConfig{Writers: 4, PerTx: 10, Keys: 256, Pause: time.Millisecond, Limit: tc.events / 2}
			if err := workload.Fill(d.db, tc.events/2, shape); err != nil {
				t.Fatal(err)
			}
			cfg := workload.RelayConfig{Dialect: tc.dialect, DSN: d.dsn, Batch: 50}
			relays := startFleet(t, d.db, cfg, 0, tc.relays)
			relays.supervise(t)
			w := workload.StartWriters(d.db, shape)
			kills := 0
			for {
				select {
				case <-w.Done():
				case <-time.After(2*time.Second + rand.N(time.Second)):
					p := relays.procs[rand.N(len(relays.procs))]
					if p.Signal(syscall.SIGKILL) == nil {
						kills++
					}
					continue
				}
				break
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
				expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault, drain: 90 * time.Second})
		})
	}
}
