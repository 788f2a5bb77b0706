package relay

import (
	"context"
	"database/sql"
)

// warmConns is how many connections of the pool Start makes ready before
// its first claim: the one its claims keep (see claimConn), one for the
// completer, which records a batch while the next is claimed, and one for
// the heartbeater, janitor or rescuer beside them.
const warmConns = 3

// warmPool makes warmConns connections of the pool ready before the first
// claim: it takes them at once (the pool opens those it does not hold
// idle), reads the outbox table on each (a backend's first statement on a
// table loads the table's and its indexes' descriptions), and hands them
// back idle. Without it, the first batch's completion opens a connection:
// tens of milliseconds on PostgreSQL, during which the next batch waits
// for the completer and nothing more is claimed, so that the first events
// after a start waited far longer than the rest.
//
// It is skipped where the completion does not run beside the claim
// (SQLite), and where the pool allows fewer than claimConnMinPool
// connections (the rest of the relay and the handlers need them). It is
// best effort: a failure is logged at debug and Start goes on.
func (r *Relay) warmPool(ctx context.Context) {
	if !r.drv.concurrentWriters() {
		return
	}
	pool, err := r.db.DB()
	if err != nil {
		return
	}
	if limit := pool.Stats().MaxOpenConnections; limit > 0 && limit < claimConnMinPool {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, claimConnTimeout)
	defer cancel()
	conns := make([]*sql.Conn, 0, warmConns)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range warmConns {
		c, err := pool.Conn(ctx)
		if err != nil {
			r.log.Debug("opening connections before the first claim failed", "error", err)
			return
		}
		conns = append(conns, c)
		if _, err := c.ExecContext(ctx, "SELECT id FROM "+r.table+" WHERE id = 0"); err != nil {
			r.log.Debug("reading the outbox table before the first claim failed", "error", err)
			return
		}
	}
}
