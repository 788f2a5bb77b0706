package drivertest

import (
	"database/sql"
	"database/sql/driver"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseRelayLocker(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	if !drv.HasRelayLock() {
		t.Skipf("%s has no relay lock: a relay there is always active", drv.Name())
	}
	s := suite{drv: drv, setup: setup}
	t.Run("OneHolder", s.lockOneHolder)
	t.Run("SessionEndFreesIt", s.lockSessionEndFreesIt)
}

// One session holds a table's lock; another cannot take it until it is
// unlocked; another table's lock is another lock.
func (s suite) lockOneHolder(t *testing.T) {
	db := s.setup(t)
	cs := lockConns(t, db, 2)
	if !s.tryLock(t, cs[0], Table) {
		t.Fatal("the first session did not get the free lock")
	}
	if s.tryLock(t, cs[1], Table) {
		t.Fatal("a second session took a held lock")
	}
	if !s.tryLock(t, cs[1], "other_events") {
		t.Fatal("another table's lock was held by the first")
	}
	must(t, s.drv.RelayUnlock(t.Context(), cs[0], Table))
	if !s.tryLock(t, cs[1], Table) {
		t.Fatal("the lock was not free after RelayUnlock")
	}
	must(t, s.drv.RelayUnlock(t.Context(), cs[1], Table))
	must(t, s.drv.RelayUnlock(t.Context(), cs[1], "other_events"))
}

// A session that ends loses the lock: a relay that dies hands over.
func (s suite) lockSessionEndFreesIt(t *testing.T) {
	db := s.setup(t)
	cs := lockConns(t, db, 2)
	if !s.tryLock(t, cs[0], Table) {
		t.Fatal("the first session did not get the free lock")
	}
	id, err := s.drv.Session(t.Context(), cs[0])
	must(t, err)
	other, err := s.drv.Session(t.Context(), cs[1])
	must(t, err)
	if id == other || id == 0 {
		t.Fatalf("sessions %d and %d: want two distinct ids", id, other)
	}
	// End the holder's session as a dead client's ends: the pool
	// discards a connection that reports ErrBadConn, closing it.
	_ = cs[0].Raw(func(any) error { return driver.ErrBadConn })
	deadline := time.Now().Add(10 * time.Second)
	for !s.tryLock(t, cs[1], Table) {
		if time.Now().After(deadline) {
			t.Fatal("the lock stayed held after its session ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	must(t, s.drv.RelayUnlock(t.Context(), cs[1], Table))
}

// lockConns takes n connections of db's pool, closed when t ends.
func lockConns(t *testing.T, db *gorm.DB, n int) []*sql.Conn {
	sqlDB, err := db.DB()
	must(t, err)
	var cs []*sql.Conn
	for range n {
		c, err := sqlDB.Conn(t.Context())
		must(t, err)
		t.Cleanup(func() { _ = c.Close() })
		cs = append(cs, c)
	}
	return cs
}

// tryLock takes table's relay lock on c, reporting whether it got it.
func (s suite) tryLock(t *testing.T, c *sql.Conn, table string) bool {
	t.Helper()
	ok, err := s.drv.TryRelayLock(t.Context(), c, table)
	must(t, err)
	return ok
}
