package drivertest

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func exerciseKeyLocks(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	s := suite{drv: drv, setup: setup}
	t.Run("PruneKeyLocks", s.pruneKeyLocks)
	t.Run("PruneKeyLocksSkipsHeldKeys", s.pruneKeyLocksSkipsHeldKeys)
}

// lockKeys locks keys in a transaction of its own.
func (s suite) lockKeys(t *testing.T, db *gorm.DB, keys ...string) {
	t.Helper()
	must(t, db.Transaction(func(tx *gorm.DB) error {
		return s.drv.LockKeys(tx, sqldriver.LockKeysParams{Table: Table, Keys: keys})
	}))
}

// PruneKeyLocks keeps the locks used recently, deletes the others, and
// never stops keys from being locked again.
func (s suite) pruneKeyLocks(t *testing.T) {
	db := s.setup(t)
	s.lockKeys(t, db, "a", "b")
	if n, err := s.drv.PruneKeyLocks(t.Context(), db, Table, time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("PruneKeyLocks(1h) right after locking: %d, %v; want 0", n, err)
	}
	time.Sleep(20 * time.Millisecond)
	n, err := s.drv.PruneKeyLocks(t.Context(), db, Table, time.Millisecond, 1)
	must(t, err)
	if n > 1 {
		t.Fatalf("PruneKeyLocks with limit 1 deleted %d", n)
	}
	if ok, _ := s.drv.TableExists(db, Table+"_keys"); ok {
		if n != 1 {
			t.Fatalf("PruneKeyLocks(1ms) deleted %d of the 2 old lock rows, want 1 (the limit)", n)
		}
		if got := count(t, db, Table+"_keys", "1 = 1"); got != 1 {
			t.Fatalf("%d lock rows left, want 1", got)
		}
	}
	s.lockKeys(t, db, "a", "b")
}

// PruneKeyLocks neither waits for a key a writer holds (its row looked
// unused until the writer locked it) nor deletes it, and deletes the
// other unused rows. (On MariaDB its DELETE once scanned the table under
// REPEATABLE READ, locking every row it read: it waited for the writer
// while holding the rows before the key, and every writer of those keys
// waited behind it.)
func (s suite) pruneKeyLocksSkipsHeldKeys(t *testing.T) {
	db := s.setup(t)
	if ok, _ := s.drv.TableExists(db, Table+"_keys"); !ok {
		t.Skip("the dialect keeps no partition-key lock rows")
	}
	s.lockKeys(t, db, "a", "c", "m")
	old, args := s.drv.NowPlus(-2 * time.Hour)
	must(t, db.Exec("UPDATE "+Table+"_keys SET locked_at = "+old+" WHERE partition_key IN ('a', 'm')", args...).Error)
	held := db.Begin()
	defer held.Rollback()
	must(t, s.drv.LockKeys(held, sqldriver.LockKeysParams{Table: Table, Keys: []string{"m"}}))
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := s.drv.PruneKeyLocks(t.Context(), db, Table, time.Hour, 100)
		done <- result{n, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(2 * time.Second):
		held.Rollback()
		<-done
		t.Fatal("PruneKeyLocks waited for the transaction holding key m")
	}
	must(t, r.err)
	must(t, held.Commit().Error)
	var left []string
	must(t, db.Raw("SELECT partition_key FROM "+Table+"_keys ORDER BY partition_key").Scan(&left).Error)
	if r.n != 1 || len(left) != 2 || left[0] != "c" || left[1] != "m" {
		t.Fatalf("PruneKeyLocks deleted %d, left %v; want 1 deleted (a), c and m left", r.n, left)
	}
}
