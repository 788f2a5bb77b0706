package relay

import (
	"context"
	"database/sql"
	"sync"
	"time"

	"gorm.io/gorm"
)

// claimConnAge is how long a relay keeps one pooled connection for its
// claims before it hands it back and takes another, so that the pool's
// ConnMaxLifetime and a failover still reach it.
const claimConnAge = time.Minute

// claimConnMinPool is the smallest pool limit (SetMaxOpenConns) under
// which a relay keeps a connection for its claims; an unlimited pool
// counts as large enough.
const claimConnMinPool = 6

// claimConnTimeout bounds the statements that set a claim connection up
// and reset it.
const claimConnTimeout = 5 * time.Second

// claimConn keeps one connection of the pool for a running relay's claims
// (on PostgreSQL, where the pool is unlimited or allows at least
// claimConnMinPool connections), set up by driver.claimConnSQL. The claim
// is a large statement: a connection that has not run it yet parses it
// and plans it, milliseconds each time, before PostgreSQL caches its plan.
// Left to the pool, a relay's claims land on every connection in turn
// (the pool hands out the connection used last, and the application's
// transactions, the completions and the heartbeats share it), so that
// after a relay starts, or the pool replaces its connections, claims are
// slow for a while. Claims never overlap within a relay (the claim ahead
// is awaited before the next), so one connection serves them all. It is
// given up after any failed claim (the next claim takes a fresh one) and
// after claimConnAge, reset before it goes back to the pool (or closed if
// the reset fails).
type claimConn struct {
	r            *Relay
	pool         *sql.DB
	setup, reset string
	mu           sync.Mutex
	conn         *sql.Conn
	db           *gorm.DB
	since        time.Time
}

// newClaimConn returns the claim connection of a Start, or nil where
// claims take any connection of the pool.
func newClaimConn(r *Relay) *claimConn {
	setup, reset := r.drv.claimConnSQL()
	if setup == "" || !r.cfg.listen {
		// WithListen(false) is the setting for a transaction-pooling
		// PgBouncer, where a session setting would reach other clients.
		return nil
	}
	pool, err := r.db.DB()
	if err != nil {
		return nil
	}
	if limit := pool.Stats().MaxOpenConnections; limit > 0 && limit < claimConnMinPool {
		return nil // holding one would leave the rest of the relay and its handlers too few
	}
	return &claimConn{r: r, pool: pool, setup: setup, reset: reset}
}

// get returns the session claims run on: the kept connection, taken from
// the pool and set up if there is none (or it is old), or nil (the pool)
// if that fails.
func (c *claimConn) get(ctx context.Context) *gorm.DB {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && time.Since(c.since) > claimConnAge {
		c.closeLocked()
	}
	if c.conn == nil {
		conn, err := c.pool.Conn(ctx)
		if err != nil {
			return nil
		}
		sctx, cancel := context.WithTimeout(ctx, claimConnTimeout)
		_, err = conn.ExecContext(sctx, c.setup)
		cancel()
		if err != nil {
			discard(conn)
			return nil
		}
		// A Session given a Context has a Statement of its own: setting
		// its ConnPool must not reach r.db's, which may be the
		// application's own *gorm.DB.
		db := c.r.db.Session(&gorm.Session{NewDB: true, Context: context.Background()})
		db.Statement.ConnPool = conn
		c.conn, c.db, c.since = conn, db, time.Now()
	}
	return c.db
}

// failed gives the connection up after a failed claim.
func (c *claimConn) failed() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

// close hands the connection back to the pool.
func (c *claimConn) close() { c.failed() }

// closeLocked resets the connection and hands it back to the pool, or
// closes it if the reset fails: its setup must not reach the pool's other
// users.
func (c *claimConn) closeLocked() {
	if c.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), claimConnTimeout)
	_, err := c.conn.ExecContext(ctx, c.reset)
	cancel()
	if err != nil {
		discard(c.conn)
	} else {
		_ = c.conn.Close()
	}
	c.conn, c.db = nil, nil
}
