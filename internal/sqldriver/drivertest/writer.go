package drivertest

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

func timeNow() time.Time { return time.Now() }

func exerciseWriter(t *testing.T, drv sqldriver.Driver, setup func(*testing.T) *gorm.DB) {
	s := suite{drv: drv, setup: setup}
	t.Run("InsertEvents", s.writerInsertEvents)
	t.Run("FindEvents", s.writerFindEvents)
	t.Run("FindEventsLeavesGapsFree", s.writerFindEventsLeavesGapsFree)
	t.Run("SnapshotAfterUpdate", s.writerSnapshotAfterUpdate)
	t.Run("BeginWrite", s.writerBeginWrite)
	t.Run("LockKeysSerialises", s.writerLockKeysSerialises)
	t.Run("LockKeysNoDeadlock", s.writerLockKeysNoDeadlock)
	t.Run("LockKeysManyKeys", s.writerLockKeysManyKeys)
}

// InsertEvents writes every row in one statement and counts them; a
// repeated id is skipped with SkipDuplicates (counted 0 where
// InsertCountsRows) and fails the statement without.
func (s suite) writerInsertEvents(t *testing.T) {
	db := s.setup(t)
	later := time.Now().Add(time.Hour)
	if n := insert(t, s.drv, db, false, event("a", "", nil), event("b", "k", &later), event("c", "k", nil)); n != 3 {
		t.Fatalf("inserted %d, want 3", n)
	}
	if got := count(t, db, Table, "status = 'pending' AND created_at IS NOT NULL"); got != 3 {
		t.Fatalf("%d pending rows, want 3", got)
	}
	now, args := s.drv.Now()
	if got := count(t, db, Table, "available_at <= "+now, args...); got != 2 {
		t.Fatalf("%d rows available now, want 2 (b is due in an hour)", got)
	}
	n := insert(t, s.drv, db, true, event("a", "", nil), event("d", "", nil))
	if s.drv.InsertCountsRows() && n != 1 {
		t.Errorf("insert of a duplicate and a new row counted %d, want 1 (InsertCountsRows)", n)
	}
	if got := count(t, db, Table, "1 = 1"); got != 4 {
		t.Fatalf("%d rows, want 4", got)
	}
	err := db.Transaction(func(tx *gorm.DB) error {
		_, err := s.drv.InsertEvents(tx, sqldriver.InsertEventsParams{Table: Table, Rows: []sqldriver.EventRow{event("a", "", nil)}, Now: time.Now()})
		return err
	})
	if err == nil {
		t.Fatal("a duplicate without SkipDuplicates was accepted")
	}
}

// FindEvents reads the rows of the ids: those the transaction wrote and,
// with Latest, one another transaction committed after this
// transaction's first read.
func (s suite) writerFindEvents(t *testing.T) {
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a", "", nil))
	find := func(tx *gorm.DB, latest bool, ids ...string) []string {
		var got []string
		must(t, s.drv.FindEvents(tx, sqldriver.FindEventsParams{Table: Table, Columns: "event_id", IDs: ids, Latest: latest}, &got))
		return got
	}
	tx := db.Begin()
	defer tx.Rollback()
	// Only a is read first: on MySQL a locking read of the absent b would
	// lock its gap and keep the other writer waiting, and the case would
	// not be exercised there.
	if got := find(tx, false, "a"); len(got) != 1 || got[0] != "a" {
		t.Fatalf("FindEvents(a) = %v, want [a]", got)
	}
	var n int
	must(t, tx.Raw("SELECT COUNT(*) FROM "+Table).Row().Scan(&n)) // a snapshot, where reads take one
	_, err := s.drv.InsertEvents(tx, sqldriver.InsertEventsParams{Table: Table, Rows: []sqldriver.EventRow{event("c", "", nil)}, Now: time.Now()})
	must(t, err)
	if got := find(tx, false, "c"); len(got) != 1 {
		t.Fatalf("FindEvents(c) after this transaction inserted c = %v, want [c]", got)
	}
	if !otherWriterCommits(t, db, func(db *gorm.DB) error {
		_, err := s.drv.InsertEvents(db, sqldriver.InsertEventsParams{Table: Table, Rows: []sqldriver.EventRow{event("b", "", nil)}, Now: time.Now()})
		return err
	}) {
		return
	}
	if got := find(tx, true, "b"); len(got) != 1 {
		t.Fatalf("FindEvents(b, Latest) after another transaction committed b = %v, want [b]", got)
	}
}

// Two writers of application-chosen ids, each reading its rows back with
// FindEvents (as the writer does to tell a duplicate from an insert), do
// not wait for each other: the read locks no gap between ids, into which
// the other writer inserts. (MariaDB's locking read of an id locked the
// gap before it: each writer's next insert waited for the other's, a
// deadlock.)
func (s suite) writerFindEventsLeavesGapsFree(t *testing.T) {
	if !s.drv.ConcurrentWriters() {
		t.Skip("one writer at a time: writers cannot interleave")
	}
	db := s.setup(t)
	write := func(tx *gorm.DB, id string) error {
		rows := []sqldriver.EventRow{event(id, "", nil)}
		if _, err := s.drv.InsertEvents(tx, sqldriver.InsertEventsParams{Table: Table, Rows: rows, SkipDuplicates: true, Now: time.Now()}); err != nil {
			return err
		}
		var got []string
		if err := s.drv.FindEvents(tx, sqldriver.FindEventsParams{Table: Table, Columns: "event_id", IDs: []string{id}}, &got); err != nil {
			return err
		}
		if len(got) != 1 || got[0] != id {
			return fmt.Errorf("FindEvents(%s) = %v, want [%s]", id, got, id)
		}
		return nil
	}
	insert(t, s.drv, db, false, event("0", "", nil), event("z", "", nil))
	a, b := db.Begin(), db.Begin()
	defer a.Rollback()
	defer b.Rollback()
	must(t, write(a, "b"))
	must(t, write(b, "d"))
	// A writes c, between its b and B's d; then B writes a, before A's b.
	done := make(chan error, 1)
	go func() { done <- write(a, "c") }()
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(2 * time.Second):
		b.Rollback() // let A go on
		<-done
		t.Fatal("a writer's insert waited for the other writer, which had read back an id above it")
	}
	must(t, write(b, "a"))
	must(t, a.Commit().Error)
	must(t, b.Commit().Error)
	if got := count(t, db, Table, "1 = 1"); got != 6 {
		t.Fatalf("%d rows, want 6", got)
	}
}

// SnapshotAfterUpdate says whether a plain read after an UPDATE that left
// a row as it was returns the row as stored: a transaction reads a row,
// another changes it and commits, the first updates it to a value it has
// already; its plain read then returns the other's write unless
// SnapshotAfterUpdate, and its locking read always does.
func (s suite) writerSnapshotAfterUpdate(t *testing.T) {
	if !s.drv.ConcurrentWriters() {
		t.Skip("one writer at a time: no other transaction commits meanwhile")
	}
	db := s.setup(t)
	insert(t, s.drv, db, false, event("a", "", nil))
	typeOf := func(tx *gorm.DB, locking bool) string {
		var typ string
		q := "SELECT type FROM " + Table + " WHERE event_id = 'a'"
		if locking {
			q += " FOR UPDATE"
		}
		must(t, tx.Raw(q).Scan(&typ).Error)
		return typ
	}
	tx := db.Begin()
	defer tx.Rollback()
	if got := typeOf(tx, false); got != "t" {
		t.Fatalf("type %q, want t", got)
	}
	must(t, db.Exec("UPDATE "+Table+" SET type = 'other' WHERE event_id = 'a'").Error)
	must(t, tx.Exec("UPDATE "+Table+" SET type = 'other' WHERE event_id = 'a'").Error)
	if got, want := typeOf(tx, false), "other"; (got == want) == s.drv.SnapshotAfterUpdate() {
		t.Errorf("plain read after the update: type %q; SnapshotAfterUpdate is %v", got, s.drv.SnapshotAfterUpdate())
	}
	if got := typeOf(tx, true); got != "other" {
		t.Errorf("locking read after the update: type %q, want other (as stored)", got)
	}
}

// BeginWrite, in a transaction that has not written (BEGIN DEFERRED on
// SQLite), takes the write lock: another session cannot begin writing
// until it ends. Where writers lock rows it must still succeed.
func (s suite) writerBeginWrite(t *testing.T) {
	db := s.setup(t)
	if s.drv.ConcurrentWriters() {
		must(t, db.Transaction(func(tx *gorm.DB) error { return s.drv.BeginWrite(tx, Table) }))
		return
	}
	ctx := context.Background()
	sqlDB, err := db.DB()
	must(t, err)
	conn := func() *sql.Conn {
		c, err := sqlDB.Conn(ctx)
		must(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	first, second := conn(), conn()
	exec := func(c *sql.Conn, q string) error { _, err := c.ExecContext(ctx, q); return err }
	must(t, exec(second, "PRAGMA busy_timeout = 0"))
	must(t, exec(first, "BEGIN DEFERRED"))
	defer func() { _ = exec(first, "ROLLBACK") }()
	// A deferred transaction holds no lock until it writes.
	must(t, exec(second, "BEGIN IMMEDIATE"))
	must(t, exec(second, "COMMIT"))
	tx := db.Session(&gorm.Session{NewDB: true})
	tx.Statement.ConnPool = first
	must(t, s.drv.BeginWrite(tx, Table))
	if err := exec(second, "BEGIN IMMEDIATE"); err == nil {
		_ = exec(second, "ROLLBACK")
		t.Fatal("another session began writing after BeginWrite; want it locked out")
	}
}

// LockKeys makes a second transaction locking the same key wait until
// the first ends.
func (s suite) writerLockKeysSerialises(t *testing.T) {
	db := s.setup(t)
	tx := db.Begin()
	must(t, tx.Error)
	must(t, s.drv.LockKeys(tx, sqldriver.LockKeysParams{Table: Table, Keys: []string{"k", "other"}}))
	locked := make(chan time.Time, 1)
	go func() {
		err := db.Transaction(func(tx2 *gorm.DB) error {
			err := s.drv.LockKeys(tx2, sqldriver.LockKeysParams{Table: Table, Keys: []string{"k"}})
			locked <- time.Now()
			return err
		})
		if err != nil {
			t.Errorf("second LockKeys: %v", err)
		}
	}()
	time.Sleep(300 * time.Millisecond)
	released := time.Now()
	must(t, tx.Commit().Error)
	if at := <-locked; at.Before(released) {
		t.Fatalf("the second transaction locked key k while the first held it")
	}
}

// Transactions locking the same keys in different orders do not
// deadlock.
func (s suite) writerLockKeysNoDeadlock(t *testing.T) {
	db := s.setup(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		keys := []string{"a", "b", "c", "a"}
		if i%2 == 1 {
			keys = []string{"c", "b", "a"}
		}
		wg.Go(func() {
			errs <- db.Transaction(func(tx *gorm.DB) error {
				if err := s.drv.LockKeys(tx, sqldriver.LockKeysParams{Table: Table, Keys: keys}); err != nil {
					return err
				}
				time.Sleep(20 * time.Millisecond)
				return nil
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("LockKeys: %v", err)
		}
	}
}

// manyKeys is more distinct partition keys than one statement with a
// bind parameter per key (two on PostgreSQL) can take: PostgreSQL and
// MySQL allow 65,535 per statement. (PostgreSQL's lock table, 64 locks a
// connection by default, would not hold one lock per key either.)
const manyKeys = 70000

// LockKeys takes any number of keys (one Emit may carry as many), and a
// transaction locking many keys and one locking a few of them wait for
// each other, whichever comes first; two transactions locking the same
// many keys, given in opposite orders, do not deadlock.
func (s suite) writerLockKeysManyKeys(t *testing.T) {
	db := s.setup(t)
	many := make([]string, manyKeys)
	for i := range many {
		many[i] = fmt.Sprintf("key-%06d", i)
	}
	reversed := slices.Clone(many)
	slices.Reverse(reversed)
	few := []string{"other", many[manyKeys/2]}
	t.Run("ManyThenMany", func(t *testing.T) { s.lockWaits(t, db, reversed, many) })
	t.Run("ManyThenFew", func(t *testing.T) { s.lockWaits(t, db, many, few) })
	t.Run("FewThenMany", func(t *testing.T) { s.lockWaits(t, db, few, reversed) })
}

// lockWaits checks that a transaction locking second waits while one that
// locked first is open, and locks them once it commits.
func (s suite) lockWaits(t *testing.T, db *gorm.DB, first, second []string) {
	tx := db.Begin()
	must(t, tx.Error)
	defer tx.Rollback()
	if err := s.drv.LockKeys(tx, sqldriver.LockKeysParams{Table: Table, Keys: first}); err != nil {
		t.Fatalf("LockKeys of %d keys: %v", len(first), err)
	}
	done := make(chan error, 1)
	go func() {
		done <- db.Transaction(func(tx2 *gorm.DB) error {
			return s.drv.LockKeys(tx2, sqldriver.LockKeysParams{Table: Table, Keys: second})
		})
	}()
	select {
	case err := <-done:
		t.Fatalf("a transaction locked %d keys while another held %d of them (err %v)", len(second), len(first), err)
	case <-time.After(300 * time.Millisecond):
	}
	must(t, tx.Commit().Error)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("LockKeys of %d keys after the first transaction committed: %v", len(second), err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the second transaction did not lock its keys within 60s of the first committing: a deadlock?")
	}
}

// otherWriterCommits runs write in a transaction of its own while the
// caller holds an open transaction, and reports whether it committed. It
// skips t where the database runs one writer at a time (the open
// transaction holds the write lock: nothing else can commit meanwhile).
func otherWriterCommits(t *testing.T, db *gorm.DB, write func(*gorm.DB) error) bool {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- db.Transaction(write) }()
	select {
	case err := <-done:
		must(t, err)
		return true
	case <-time.After(time.Second):
		t.Skip("another transaction cannot commit while one is open: the database has a single writer")
		return false
	}
}
