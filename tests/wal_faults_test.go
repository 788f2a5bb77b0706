package tests

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// streamerOf returns the relay process that streams the slot (its worker
// id, recorded in the WAL status table, starts with its name), or nil.
func streamerOf(t *testing.T, d *database, relays *fleet) *workload.RelayProc {
	t.Helper()
	var id string
	if err := d.db.Raw(`SELECT streamer FROM outbox_events_wal WHERE updated_at > now() - interval '2 seconds'`).Scan(&id).Error; err != nil {
		t.Logf("reading the streamer: %v", err)
	}
	for _, p := range relays.procs {
		if id != "" && strings.HasPrefix(id, p.Name+"-") && p.Running() {
			return p
		}
	}
	return nil
}

// WAL mode: the relay process that streams the slot is SIGKILLed every
// two to three seconds (15 s) while four writers commit events; three
// relay processes, restarted 0.2 s after each kill, take over from each
// other (one streams, PostgreSQL refusing the others the slot while it is
// active). Every committed event has exactly one effect, each key's in
// commit order: what the killed streamer delivered and had not confirmed
// is delivered again, and the handlers' idempotency records drop it.
func TestWALRelaysKilled(t *testing.T) {
	t.Parallel()
	start := time.Now()
	d := startWALDatabase(t)
	relays := startFleet(t, d.db, walRelayConfig(d), 0, 3)
	relays.supervise(t)
	w := workload.StartWriters(d.db, workload.WriterConfig{Writers: 4, KeySeq: true, Keys: 32})
	kills := 0
	for time.Since(start) < 20*time.Second || kills < 4 {
		time.Sleep(2*time.Second + time.Duration(time.Now().UnixNano()%int64(time.Second)))
		if p := streamerOf(t, d, relays); p != nil && p.Signal(syscall.SIGKILL) == nil {
			kills++
		}
		if time.Since(start) > 60*time.Second {
			break
		}
	}
	lastFault := time.Now()
	if kills < 3 {
		t.Errorf("only %d streaming relays were found and killed", kills)
	}
	time.Sleep(500 * time.Millisecond)
	walFinish(t, d.db, relays, w, ending{scenario: "WAL mode, streaming relays SIGKILLed repeatedly", transport: workload.Inproc,
		faults: fmt.Sprintf("%d SIGKILLs of the streaming relay", kills), expect: workload.Expect{Ordered: true},
		start: start, lastFault: lastFault})
}

// WAL mode: the database is killed twice (immediate stop) and restarted
// while writers and two relays (one in this process, one in its own) run.
// The streamer reconnects and resumes from the slot's confirmed position:
// every committed event once, in its key's commit order.
func TestWALDatabaseKilled(t *testing.T) {
	t.Parallel()
	start := time.Now()
	d := startWALDatabase(t)
	relays := startFleet(t, d.db, walRelayConfig(d), 1, 1)
	w := workload.StartWriters(d.db, workload.WriterConfig{Writers: 4, KeySeq: true})
	for range 2 {
		pause(4 * time.Second)
		d.crash(t)
		pause(2 * time.Second)
		d.restart(t)
	}
	lastFault := time.Now()
	pause(3 * time.Second)
	walFinish(t, d.db, relays, w, ending{scenario: "WAL mode, database killed", transport: workload.Inproc,
		faults: "2 kills", expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault})
}
