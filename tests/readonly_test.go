package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// Scenario 7: the database turns read-only while writers and relays run
// (as when its disk fills up or it fails over to a replica): PostgreSQL's
// default_transaction_read_only through ALTER SYSTEM and a reload,
// MariaDB's read_only for a user without global privileges. Writers get
// errors and leave nothing half-written (no business row without its
// event, no event without its row); relays recover once it is writable
// again, and every committed event has exactly one effect.
func TestDatabaseReadOnly(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{workload.Postgres, workload.MySQL} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, dialect)
			app := d.db
			dsn := d.dsn
			var readOnly func(on bool)
			if d.pg != nil {
				readOnly = func(on bool) {
					d.pg.Exec(t, fmt.Sprintf("ALTER SYSTEM SET default_transaction_read_only = %v", on), "SELECT pg_reload_conf()")
				}
			} else {
				d.maria.CreateUser(t, "app") // root would ignore read_only
				dsn = d.maria.UserDSN("app")
				app = open(t, dialect, dsn)
				readOnly = func(on bool) { d.maria.Exec(t, fmt.Sprintf("SET GLOBAL read_only = %v", on)) }
			}
			relays := startFleet(t, app, workload.RelayConfig{Dialect: dialect, DSN: dsn}, 2, 1)
			w := workload.StartWriters(app, workload.WriterConfig{Pause: 10 * time.Millisecond})
			pause(3 * time.Second)
			readOnly(true)
			before := w.Committed()
			pause(6 * time.Second)
			during := w.Committed() - before
			readOnly(false)
			lastFault := time.Now()
			pause(3 * time.Second)
			ws := w.Stop()
			if ws.Failed == 0 {
				t.Error("no writer transaction failed while the database was read-only")
			} else {
				t.Logf("writers: %d transactions failed, last with %v", ws.Failed, ws.LastErr)
			}
			if during > 20 { // a reload reaches every session within moments
				t.Errorf("%d events committed while the database was read-only", during)
			}
			finish(t, d.db, relays, w, ending{scenario: "database read-only", dialect: dialect, transport: workload.Inproc,
				faults: fmt.Sprintf("read-only for 6s (%d events committed meanwhile)", during),
				expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault})
		})
	}
}
