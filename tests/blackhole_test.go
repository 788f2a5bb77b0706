package tests

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/tests/internal/faultnet"
	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// Scenario 5b: the network between the relays and the database turns into
// a blackhole for longer than the lease: every connection open then (and
// every one made meanwhile) goes silent for good, with no error and no
// close on either side, as when a firewall or NAT forgets its state or the
// database fails over to another machine. The relays' pools still hold
// those dead connections afterwards; a statement sent on one gets no
// answer ever, so each must be bounded by a deadline. Every committed
// event has exactly one effect, every relay delivers again and its
// heartbeats go on.
func TestNetworkBlackhole(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dialect, session string }{
		// The server ends a transaction its client has left idle (the
		// client is gone: its connection died in the blackhole), which
		// otherwise holds its locks until the server notices the dead
		// connection, two hours later with the kernel's default TCP
		// keepalive; and, on MariaDB, reads and writes time out, since
		// the driver ignores contexts in COMMIT and ROLLBACK.
		{workload.Postgres, "&idle_in_transaction_session_timeout=5000"},
		{workload.MySQL, "&idle_transaction_timeout=5&readTimeout=10s&writeTimeout=10s"},
	} {
		dialect := tc.dialect
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, dialect)
			proxy := faultnet.New(t, d.addr())
			cfg := workload.RelayConfig{Dialect: dialect, DSN: d.dsnAt(proxy.Addr()) + tc.session, Lease: 3 * time.Second}
			relays := startFleet(t, open(t, dialect, cfg.DSN), cfg, 2, 1)
			w := workload.StartWriters(d.db, workload.WriterConfig{Pause: 10 * time.Millisecond})
			pause(2 * time.Second)
			proxy.Blackhole()
			pause(cfg.Lease + 2*time.Second)
			proxy.Restore()
			lastFault := time.Now()
			s := proxy.Stats()
			pause(2 * time.Second)
			finish(t, d.db, relays, w, ending{scenario: "network to the database a blackhole", dialect: dialect,
				transport: workload.Inproc, faults: fmt.Sprintf("a blackhole of %v: %d of %d connections dead",
					cfg.Lease+2*time.Second, s.Dead, s.Accepted),
				expect: workload.Expect{Ordered: true}, start: start, lastFault: lastFault})
		})
	}
}

// The MySQL driver (go-sql-driver/mysql) ignores contexts in COMMIT and
// ROLLBACK: a COMMIT sent on a connection that died silently waits for
// ever, whatever the transaction's context says, unless the DSN sets
// readTimeout. Every relay transaction ends with a COMMIT (claims,
// completions, handlers' DoTx), hence the DSN requirement; this test shows
// it on the driver alone.
func TestMySQLCommitNeedsReadTimeout(t *testing.T) {
	t.Parallel()
	d := startDatabase(t, workload.MySQL)
	for _, tc := range []struct {
		name, dsn string
		bounded   bool
	}{
		{"without readTimeout", "", false},
		{"readTimeout=2s", "&readTimeout=2s", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			proxy := faultnet.New(t, d.addr())
			db, err := sql.Open("mysql", d.dsnAt(proxy.Addr())+tc.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO fault_probes (event_id, relay) VALUES ('commit', ?)`, tc.name); err != nil {
				t.Fatal(err)
			}
			proxy.Blackhole()
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- tx.Commit() }()
			select {
			case err := <-done:
				if !tc.bounded {
					t.Logf("COMMIT returned after %v without readTimeout (%v): has the driver learnt to honour contexts?", time.Since(start), err)
				} else if err == nil {
					t.Error("COMMIT through a blackhole succeeded")
				}
			case <-time.After(5 * time.Second):
				if tc.bounded {
					t.Errorf("COMMIT through a blackhole still waiting after 5s with %s", tc.dsn)
				}
				t.Logf("COMMIT through a blackhole still waiting after 5s, its context expired 4s ago")
				proxy.Close() // resets the connection: the COMMIT returns
				<-done
			}
		})
	}
}
