package tests

import (
	"testing"
	"time"

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
	rep := walFinish(t, d.db, relays, w, ending{scenario: "WAL mode delivers", transport: workload.Inproc,
		expect: workload.Expect{Ordered: true}, start: start, lastFault: start})
	if rep.Committed < 3000 {
		t.Errorf("committed %d events, want 3000", rep.Committed)
	}
	if n := tableRows(t, d); n != 0 {
		t.Errorf("%d events went into the outbox table; every delivery succeeded, so none should", n)
	}
}
