package relay

import (
	"context"
	"database/sql"
	sqldrv "database/sql/driver"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Roles of a relay run WithSingleActive, as its heartbeats record them
// (RelayStatus.Role).
const (
	// RoleActive is the relay that holds the table's lock and claims.
	RoleActive = "active"
	// RoleStandby is a relay waiting for the lock: it claims nothing.
	RoleStandby = "standby"
)

// singleActive is the WithSingleActive service: it takes the table's
// advisory lock on a connection of its own and holds it while the relay
// runs, checking the connection every retry interval. The fetcher claims
// only while active reports true. A standby retries the lock every retry
// interval; when the holder's session ends, the lock frees and a standby
// takes it. When the lock's connection fails, the relay stops claiming at
// once (it may have lost the lock) and tries again.
//
// A nil *singleActive (the option off) is always active and has no role.
type singleActive struct {
	r       *Relay
	lock    sqldriver.RelayLocker // nil: always active (SQLite)
	retry   time.Duration
	changed func() // called when the role changes

	isActive atomic.Bool
	cancel   context.CancelFunc
	done     chan struct{}
}

// newSingleActive returns the service of r, or nil without
// WithSingleActive.
func newSingleActive(r *Relay) *singleActive {
	if !r.cfg.singleActive {
		return nil
	}
	s := &singleActive{r: r, retry: min(r.cfg.pollInterval, time.Second)}
	if drv := r.kind.Driver(); drv.HasRelayLock() {
		s.lock = drv
	} else {
		s.isActive.Store(true)
	}
	return s
}

// active reports whether the relay may claim.
func (s *singleActive) active() bool { return s == nil || s.isActive.Load() }

// role returns RoleActive or RoleStandby, or "" without WithSingleActive.
func (s *singleActive) role() string {
	switch {
	case s == nil:
		return ""
	case s.isActive.Load():
		return RoleActive
	default:
		return RoleStandby
	}
}

// wait waits for the retry interval, or until ctx ends: the fetcher's
// pause while standby. It reports false when ctx ended.
func (s *singleActive) wait(ctx context.Context) bool {
	t := time.NewTimer(s.retry)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// start tries the lock at once, and keeps trying (or holding it) in the
// background until stop or ctx's end.
func (s *singleActive) start(ctx context.Context, wg *sync.WaitGroup) {
	if s == nil || s.lock == nil {
		return
	}
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	conn := s.acquire(ctx)
	if conn == nil {
		s.r.log.Info("single-active: another relay holds the table's lock; standby", "table", s.r.table, "retry", s.retry)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(s.done)
		s.run(ctx, conn)
	}()
}

// stop releases the lock and returns once it is released.
func (s *singleActive) stop() {
	if s == nil || s.cancel == nil {
		return
	}
	s.cancel()
	<-s.done
}

// run holds the lock on conn (nil: not held) and checks it, or retries
// it, every retry interval until ctx ends.
func (s *singleActive) run(ctx context.Context, conn *sql.Conn) {
	t := time.NewTicker(s.retry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			s.release(ctx, conn)
			return
		case <-t.C:
		}
		if ctx.Err() != nil {
			continue // stopping: release the lock rather than check it
		}
		if conn == nil {
			conn = s.acquire(ctx)
		} else if err := conn.PingContext(ctx); err != nil && ctx.Err() == nil {
			s.setActive(false)
			s.r.log.Warn("single-active: the lock's connection failed; standby until the lock is taken again", "error", err)
			discard(conn)
			conn = nil
		}
	}
}

// acquire tries the lock on a connection of the pool and returns the
// connection if it took it, else nil.
func (s *singleActive) acquire(ctx context.Context) *sql.Conn {
	sqlDB, err := s.r.db.DB()
	if err != nil {
		s.r.log.Warn("single-active: no database handle", "error", err)
		return nil
	}
	conn, err := sqlDB.Conn(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.r.log.Warn("single-active: no connection for the lock", "error", err)
		}
		return nil
	}
	ok, err := s.lock.TryRelayLock(ctx, conn, s.r.table)
	if err == nil && !ok {
		_ = conn.Close() // holds nothing: back to the pool
		return nil
	}
	if err == nil {
		var id int64
		if id, err = s.lock.Session(ctx, conn); err == nil {
			s.setActive(true)
			s.r.log.Info("single-active: took the table's lock; active", "table", s.r.table, "session", id)
			return conn
		}
	}
	if err != nil && ctx.Err() == nil {
		s.r.log.Warn("single-active: trying the lock failed", "error", err)
	}
	discard(conn) // a lock taken and unconfirmed is released with the session
	return nil
}

// release unlocks and ends conn's session, within 5s of ctx's end.
func (s *singleActive) release(ctx context.Context, conn *sql.Conn) {
	if conn == nil {
		return
	}
	s.setActive(false)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := s.lock.RelayUnlock(uctx, conn, s.r.table); err != nil {
		s.r.log.Debug("single-active: unlocking failed (the session is closed anyway)", "error", err)
	}
	discard(conn)
}

// setActive records the role and reports a change.
func (s *singleActive) setActive(on bool) {
	if s.isActive.Swap(on) != on && s.changed != nil {
		s.changed()
	}
}

// discard closes conn's session rather than returning it to the pool, so
// that a lock it may hold, or a setting it was given, goes with it.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return sqldrv.ErrBadConn })
	_ = conn.Close()
}

// roleMark separates the publisher's description from the role in the
// relays table's publisher column, which records both (no migration).
const roleMark = " | single-active: "

// withRole returns the publisher column's text for publisher and role,
// within the column's size.
func withRole(publisher, role string) string {
	if role == "" {
		return publisher
	}
	suffix := roleMark + role
	if r := []rune(publisher); len(r)+len([]rune(suffix)) > maxDescription {
		publisher = string(r[:maxDescription-len([]rune(suffix))-1]) + "…"
	}
	return publisher + suffix
}

// splitRole splits the publisher column's text into the publisher's
// description and the role (see withRole).
func splitRole(col string) (publisher, role string) {
	for _, role := range []string{RoleActive, RoleStandby} {
		if p, ok := strings.CutSuffix(col, roleMark+role); ok {
			return p, role
		}
	}
	return col, ""
}
