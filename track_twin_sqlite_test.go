package outbox_test

import (
	"context"
	"strings"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// openDeferredSQLite opens a fresh SQLite database whose transactions
// begin deferred (mattn/go-sqlite3's default): the write lock is taken by
// the first write, not by BEGIN.
func openDeferredSQLite(t *testing.T, cfg *gorm.Config) *gorm.DB {
	t.Helper()
	dsn := strings.Replace(testenv.DSN(t, testenv.SQLite), "_txlock=immediate", "_txlock=deferred", 1)
	db, err := gorm.Open(testenv.SQLiteDialector(dsn), cfg)
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	sqlDB.SetMaxOpenConns(4)
	return db
}

type pauseKey struct{}

// pauseBefore makes an update or create whose context holds a pause
// channel pair stop just before gorm:update or gorm:create (after Track's
// reads): it sends on the first and waits for the second to close.
func pauseBefore(t *testing.T, db *gorm.DB) {
	t.Helper()
	pause := func(db *gorm.DB) {
		if p, ok := db.Statement.Context.Value(pauseKey{}).([2]chan struct{}); ok {
			p[0] <- struct{}{}
			<-p[1]
		}
	}
	must(t, db.Callback().Update().After("outbox:track_before_update").Before("gorm:update").Register("test:pause", pause))
	must(t, db.Callback().Create().After("outbox:track_before_create").Before("gorm:create").Register("test:pause", pause))
}

// With deferred transactions, another session writes and commits while a
// bulk update (or an upsert) is about to write (just before gorm:update, after Track's
// reads), if it can (busy timeout 0). Untracked it can, and the UPDATE
// then runs. Tracked, the UPDATE must run too: Track's reads hold the
// write lock, so that the other session cannot commit between them and
// the UPDATE (a read transaction that another writer committed after
// cannot become a writer: "database is locked", whatever the timeout).
func TestTrackTwinSQLiteDeferredReads(t *testing.T) {
	for name, write := range map[string]func(db *gorm.DB) *gorm.DB{
		"BulkUpdate": func(db *gorm.DB) *gorm.DB { return db.Model(&TwinDoc{}).Where("owner = ?", "ann").Update("amount", 4) },
		"Upsert": func(db *gorm.DB) *gorm.DB {
			return db.Clauses(clause.OnConflict{UpdateAll: true}).Create(&[]TwinTag{{Code: "a", State: "up"}, {Code: "n", State: "new"}})
		},
	} {
		t.Run(name, func(t *testing.T) {
			tw := newTwin(t, testenv.SQLite, func(cfg *gorm.Config) *gorm.DB { return openDeferredSQLite(t, cfg) })
			tw.seed(t)
			before := dump(t, tw.tracked)
			plain, tracked := writeWhileOtherCommits(t, tw.plain, write), writeWhileOtherCommits(t, tw.tracked, write)
			if plain.err != nil {
				t.Fatalf("untracked: %v", plain.err)
			}
			tw.compare(t, tracked, plain)
			checkEvents(t, before, tracked.rows, trackedOf(t, tw.tracked), nil)
		})
	}
}

// writeWhileOtherCommits runs write, and when it is about to write (after
// Track's reads) lets another session write and commit if it can.
func writeWhileOtherCommits(t *testing.T, db *gorm.DB, write func(db *gorm.DB) *gorm.DB) outcome {
	t.Helper()
	pauseBefore(t, db)
	must(t, db.Exec("CREATE TABLE IF NOT EXISTS twin_scratch (n integer)").Error)
	other := rawConn(t, db)
	pause := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	done := make(chan *gorm.DB, 1)
	go func() { done <- write(db.WithContext(context.WithValue(context.Background(), pauseKey{}, pause))) }()
	<-pause[0]
	if other("BEGIN IMMEDIATE") == nil {
		must(t, other("INSERT INTO twin_scratch VALUES (1)"))
		must(t, other("COMMIT"))
	}
	close(pause[1])
	res := <-done
	return outcome{rows: dump(t, db), affected: res.RowsAffected, err: res.Error}
}

// rawConn returns a function that runs SQL on a connection of db's pool
// of its own, whose busy timeout is 0 (a locked database fails at once).
func rawConn(t *testing.T, db *gorm.DB) func(q string) error {
	t.Helper()
	sqlDB, err := db.DB()
	must(t, err)
	c, err := sqlDB.Conn(context.Background())
	must(t, err)
	t.Cleanup(func() { _ = c.Close() })
	exec := func(q string) error { _, err := c.ExecContext(context.Background(), q); return err }
	must(t, exec("PRAGMA busy_timeout = 0"))
	return exec
}
