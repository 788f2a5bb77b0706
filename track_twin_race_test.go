package outbox_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// Two transactions interleaved, step by step, on each twin: the steps are
// ordered by channels and by waiting until a session is blocked on a lock
// (read from the server), never by sleeping.

// sessionID returns the server's id of tx's session.
func sessionID(t *testing.T, tx *gorm.DB) int64 {
	t.Helper()
	var id int64
	q := "SELECT pg_backend_pid()"
	if tx.Dialector.Name() == "mysql" {
		q = "SELECT CONNECTION_ID()"
	}
	must(t, tx.Raw(q).Scan(&id).Error)
	return id
}

// lockWaiting reports whether session id waits for a lock.
func lockWaiting(t *testing.T, db *gorm.DB, id int64) bool {
	t.Helper()
	var n int64
	q := "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = ? AND wait_event_type = 'Lock'"
	if db.Dialector.Name() == "mysql" {
		q = "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_mysql_thread_id = ? AND trx_state = 'LOCK WAIT'"
	}
	must(t, db.Raw(q, id).Scan(&n).Error)
	return n > 0
}

// stepped runs step in a goroutine and returns once it is done or blocked
// on a lock (its session, id, waits), with a channel for its result.
func stepped(t *testing.T, db *gorm.DB, id int64, step func() error) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- step() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-done:
			done <- err
			return done
		default:
		}
		if lockWaiting(t, db, id) {
			return done
		}
		if time.Now().After(deadline) {
			t.Fatal("the step neither finished nor waited for a lock within 30s")
		}
		time.Sleep(pollEvery(db))
	}
}

// pollEvery is how often lockWaiting may ask: InnoDB serves its
// INFORMATION_SCHEMA transaction tables from a cache that it refreshes
// only when it was not read for 0.1 s.
func pollEvery(db *gorm.DB) time.Duration {
	if db.Dialector.Name() == "mysql" {
		return 150 * time.Millisecond
	}
	return 5 * time.Millisecond
}

// eachServerTwin runs fn on the twins of the dialects whose transactions
// interleave (not SQLite: one writer at a time).
func eachServerTwin(t *testing.T, fn func(t *testing.T, tw *twin)) {
	t.Helper()
	for _, d := range []string{testenv.Postgres, testenv.MySQL} {
		t.Run(d, func(t *testing.T) { fn(t, openTwin(t, d)) })
	}
}

// Issue 24, defect 2: a bulk update with Or waits for a row another
// transaction locked; that one inserts a matching row and commits. The
// update changes what it would change untracked (on PostgreSQL: not the
// new row, which its snapshot does not see), each changed row with its
// event.
func TestTrackTwinBulkOrWhileAnotherCommits(t *testing.T) {
	eachServerTwin(t, func(t *testing.T, tw *twin) {
		tw.seed(t)
		before := dump(t, tw.tracked)
		run := func(db *gorm.DB) outcome {
			other := db.Begin()
			defer other.Rollback()
			must(t, other.Exec("SELECT id FROM twin_docs WHERE id = 1 FOR UPDATE").Error)
			tx := db.Begin()
			defer tx.Rollback()
			id := sessionID(t, tx)
			var res *gorm.DB
			done := stepped(t, db, id, func() error {
				res = tx.Model(&TwinDoc{}).Where("state = ?", "new").Or("state = ?", "pending").Update("amount", 42)
				return res.Error
			})
			must(t, other.Exec("INSERT INTO twin_docs (id, state, amount, owner, updated_at) VALUES (7, 'new', 0, 'dan', ?)", twinSeeded).Error)
			must(t, other.Commit().Error)
			err := <-done
			if err == nil {
				err = tx.Commit().Error
			}
			return outcome{rows: dump(t, db), affected: res.RowsAffected, err: err}
		}
		plain, tracked := run(tw.plain), run(tw.tracked)
		tw.compare(t, tracked, plain)
		// The row the other transaction inserted.
		before["twin_doc"]["7"] = normalized(t, TwinDoc{ID: 7, State: "new", Owner: "dan", UpdatedAt: twinSeeded})
		checkEvents(t, before, tracked.rows, trackedOf(t, tw.tracked), nil)
	})
}

// Issue 24, defect 6: two transactions upsert new keys interleaved (one
// m1, the other m2, the first m3): both commit, as untracked, where the
// untracked model emits the same events from a hook.
func TestTrackTwinUpsertNewKeysInterleaved(t *testing.T) {
	eachServerTwin(t, func(t *testing.T, tw *twin) {
		tw.seed(t)
		run := func(db *gorm.DB, ctx context.Context) outcome {
			upsert := func(tx *gorm.DB, code string) error {
				return tx.WithContext(ctx).Clauses(clause.OnConflict{UpdateAll: true}).Create(&TwinTag{Code: code, State: "new"}).Error
			}
			a, b := db.Begin(), db.Begin()
			defer a.Rollback()
			defer b.Rollback()
			must(t, upsert(a, "m1"))

			done := stepped(t, db, sessionID(t, b), func() error { return upsert(b, "m2") })
			errA := upsert(a, "m3")
			if errA == nil {
				errA = a.Commit().Error
			}
			errB := <-done
			if errB == nil {
				errB = b.Commit().Error
			}
			o := outcome{rows: dump(t, db)}
			if errA != nil || errB != nil {
				o.err = fmt.Errorf("first: %v; second: %v", errA, errB)
			}
			return o
		}
		plain := run(tw.plain, context.WithValue(context.Background(), twinEmitKey{}, true))
		tracked := run(tw.tracked, context.Background())
		if plain.err != nil {
			t.Fatalf("untracked: %v", plain.err)
		}
		tw.compare(t, tracked, plain)
		if n := countEvents(t, tw.tracked); n != 3 {
			t.Errorf("%d events, want 3", n)
		}
	})
}

// twinEmitKey in a statement's context makes TwinTag's hook emit the
// events Track writes for the tracked twin.
type twinEmitKey struct{}

func (g *TwinTag) AfterCreate(tx *gorm.DB) error {
	if tx.Statement.Context.Value(twinEmitKey{}) == nil {
		return nil
	}
	key := "twin_tag:" + g.Code
	return outbox.Emit(tx, outbox.Event{Type: "twin_tag.created", AggregateType: "twin_tag", AggregateID: g.Code, PartitionKey: key, Payload: g})
}

// Issue 24, defect 7: a transaction reads a row; another sets it to
// paid/10 and commits; the first then runs a bulk update that leaves the
// row's values as they are. Under REPEATABLE READ (MariaDB) the event
// must still carry the row as stored (paid/10), its old and new state
// paid.
func TestTrackTwinBulkUpdateAfterAnotherCommit(t *testing.T) {
	eachServerTwin(t, func(t *testing.T, tw *twin) {
		tw.seed(t)
		before := dump(t, tw.tracked)
		run := func(db *gorm.DB) outcome {
			tx := db.Begin()
			defer tx.Rollback()
			var d TwinDoc
			must(t, tx.First(&d, 1).Error)
			must(t, db.Exec("UPDATE twin_docs SET state = 'paid', amount = 10 WHERE id = 1").Error)
			res := tx.Model(&TwinDoc{}).Where("id = ?", 1).UpdateColumn("state", "paid")
			err := res.Error
			if err == nil {
				err = tx.Commit().Error
			}
			return outcome{rows: dump(t, db), affected: res.RowsAffected, err: err}
		}
		plain, tracked := run(tw.plain), run(tw.tracked)
		tw.compare(t, tracked, plain)
		// The row as the other transaction left it.
		before["twin_doc"]["1"] = normalized(t, TwinDoc{ID: 1, State: "paid", Amount: 10, Owner: "ann", UpdatedAt: twinSeeded})
		evs := trackedOf(t, tw.tracked)
		checkEvents(t, before, tracked.rows, evs, []string{"twin_doc:1"})
		if len(evs) != 1 || evs[0].Change.Old["state"] != "paid" || evs[0].Change.New["state"] != "paid" {
			t.Errorf("events %+v, want one twin_doc.updated 1, old and new state paid", evs)
		}
	})
}
