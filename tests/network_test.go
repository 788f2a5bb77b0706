package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/tests/internal/faultnet"
	"github.com/gormoutbox/outbox/tests/internal/servers"
	"github.com/gormoutbox/outbox/tests/internal/workload"
)

// netFaults makes the network through p bad, in turn: slow and lossy
// (latency, connections reset at random), cut (every connection reset, new
// ones refused) for longer than the lease, slow again, and partitioned
// (silence, no error) for longer than the lease. It returns what it did.
func netFaults(p *faultnet.Proxy, lease time.Duration) string {
	p.SetLatency(2*time.Millisecond, 6*time.Millisecond)
	p.SetResetRate(0.3)
	pause(5 * time.Second)
	p.Cut()
	pause(lease + 2*time.Second)
	p.Restore()
	pause(2 * time.Second)
	p.Partition()
	pause(lease + 2*time.Second)
	p.SetLatency(0, 0)
	p.SetResetRate(0)
	p.Restore()
	s := p.Stats()
	return fmt.Sprintf("latency 2-8ms and %d resets for 5s, a cut of %v, a partition of %v; %d connections through the proxy",
		s.Resets, lease+2*time.Second, lease+2*time.Second, s.Accepted)
}

// Scenario 5: the network between the relays and the database (or Redis)
// is made slow and lossy, then cut and partitioned for longer than the
// lease, while writers (connected directly) go on. Every committed event
// has exactly one effect and every relay recovers.
func TestNetworkFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ transport, dialect, between string }{
		{workload.Inproc, workload.Postgres, "database"},
		{workload.Inproc, workload.MySQL, "database"},
		{workload.Stream, workload.Postgres, "redis"},
		{workload.Asynq, workload.MySQL, "redis"},
	} {
		t.Run(tc.transport+"/"+tc.dialect, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			d := startDatabase(t, tc.dialect)
			cfg := workload.RelayConfig{Dialect: tc.dialect, DSN: d.dsn, Transport: tc.transport, Lease: 3 * time.Second}
			var cons *workload.Consumers
			var proxy *faultnet.Proxy
			relayDB := d.db
			if tc.between == "database" {
				proxy = faultnet.New(t, d.addr())
				cfg.DSN = d.dsnAt(proxy.Addr())
				relayDB = open(t, tc.dialect, cfg.DSN)
			} else {
				rs := servers.StartRedis(t, servers.AOFAlways)
				proxy = faultnet.New(t, rs.Addr())
				cfg.RedisAddr = proxy.Addr()
				cons = startConsumers(t, tc.transport, d, rs.Addr())
			}
			relays := startFleet(t, relayDB, cfg, 2, 1)
			w := workload.StartWriters(d.db, workload.WriterConfig{Pause: 10 * time.Millisecond})
			pause(2 * time.Second)
			faults := netFaults(proxy, cfg.Lease)
			lastFault := time.Now()
			pause(2 * time.Second)
			finish(t, d.db, relays, w, ending{scenario: "network to the " + tc.between + " slow, lossy, cut, partitioned",
				dialect: tc.dialect, transport: tc.transport, faults: faults,
				expect: workload.Expect{Ordered: tc.transport == workload.Inproc}, start: start, lastFault: lastFault, consumers: cons})
		})
	}
}
