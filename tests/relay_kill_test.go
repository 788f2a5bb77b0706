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
// to three seconds, each restarted 0.2 s later) while there is work (45 s
// at most): 20,000 events on PostgreSQL and MariaDB (four relay processes),
// three quarters of them a backlog committed before the relays start
// (batched inserts, much faster than writers competing with four relays
// for two cores) and a quarter committed by writers meanwhile; 2,000 on
// SQLite (one relay).
// OUTBOX_FAULTS_EVENTS sets another size. Every committed event has
// exactly one effect, in its key's commit order; the events the killed
// relays held are delivered once their lease expires.
func TestRelaysKilled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dialect string
		relays  int
		events  int
	}{
		{workload.Postgres, 4, 20000},
		{workload.MySQL, 4, 20000},
		{workload.SQLite, 1, 2000},
	} {
		if n, err := strconv.Atoi(os.Getenv("OUTBOX_FAULTS_EVENTS")); err == nil && n > 0 {
			tc.events = n
		}
		t.Run(tc.dialect, func(t *testing.T) {
			t.Parallel()
			relaysKilled(t, tc.dialect, tc.relays, tc.events)
		})
	}
}

func relaysKilled(t *testing.T, dialect string, nRelays, events int) {
	start := time.Now()
	d := startDatabase(t, dialect)
	db, dsn := d.db, d.dsn
	if dialect == workload.MySQL {
		// Statements with their arguments, not prepared (three round trips
		// each): half again as many events per second.
		dsn += "&interpolateParams=true"
		db = open(t, dialect, dsn)
	}
	shape := workload.WriterConfig{Writers: 2, PerTx: 20, Keys: 256, Pause: 5 * time.Millisecond, Limit: events / 4, Batched: true}
	if err := workload.Fill(db, events-events/4, shape); err != nil {
		t.Fatal(err)
	}
	filled := time.Since(start)
	relays := startFleet(t, db, workload.RelayConfig{Dialect: dialect, DSN: dsn, Batch: 50}, 0, nRelays)
	relays.supervise(t)
	ready := time.Since(start)
	w := workload.StartWriters(db, shape)
	// Kill a relay every 2-3 s while the writers run and the backlog lasts
	// (until less than 5% of the events are left), for 15 s at least and
	// 45 s at most; only relays up for 3 s at least, so that a restarted
	// relay delivers before it is killed again (on a loaded machine a relay
	// process takes a second or more to start).
	kills := 0
	killing := time.Now()
	writing := w.Done()
	var wrote time.Duration
	for time.Since(killing) < 45*time.Second {
		select {
		case <-writing:
			writing, wrote = nil, time.Since(start)
			continue
		case <-time.After(2*time.Second + rand.N(time.Second)):
		}
		if writing == nil && time.Since(killing) > 15*time.Second {
			if left, err := workload.Unfinished(db); err == nil && left < events/20 {
				break
			}
		}
		if up := relays.upFor(3 * time.Second); len(up) > 0 && up[rand.N(len(up))].Signal(syscall.SIGKILL) == nil {
			kills++
		}
	}
	// One more kill at the end, so that the drain starts with events held
	// by a dead relay.
	if relays.procs[0].Signal(syscall.SIGKILL) == nil {
		kills++
	}
	lastFault := time.Now()
	t.Logf("phases: database and backlog of %d ready at %v, relays at %v, writers done at %v, last kill at %v",
		events-events/4, filled.Round(time.Millisecond), ready.Round(time.Millisecond), wrote.Round(time.Millisecond),
		lastFault.Sub(start).Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond) // the supervisor restarts it
	finish(t, db, relays, w, ending{scenario: "relays SIGKILLed repeatedly", dialect: dialect, transport: workload.Inproc,
		faults: fmt.Sprintf("%d SIGKILLs of relays in %v", kills, lastFault.Sub(start).Round(time.Second)),
		expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault, drain: 60 * time.Second})
}
