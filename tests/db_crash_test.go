package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// Scenario 1: the database is killed twice while writers and four relays
// (two in this process, two in their own) run, and restarted a few seconds
// later each time. Afterwards every committed event has exactly one
// effect, in its key's commit order, and every relay still delivers.
func TestDatabaseKilled(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{workload.Postgres, workload.MySQL} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, dialect)
			relays := startFleet(t, d.db, workload.RelayConfig{Dialect: dialect, DSN: d.dsn}, 2, 2)
			w := workload.StartWriters(d.db, workload.WriterConfig{})
			const kills = 2
			for range kills {
				pause(4 * time.Second)
				d.crash(t)
				pause(3 * time.Second)
				d.restart(t)
			}
			lastFault := time.Now()
			pause(3 * time.Second)
			finish(t, d.db, relays, w, ending{scenario: "database killed", dialect: dialect, transport: workload.Inproc,
				faults: fmt.Sprintf("%d kills", kills), expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault})
		})
	}
}
