package outbox_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	mysqldriver "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func TestDedupe(t *testing.T) {
	eachDB(t, checkDedupe)
}

// MySQL's clientFoundRows=true (a common DSN setting) makes an ON DUPLICATE
// KEY UPDATE that changed nothing report one affected row: a duplicate must
// still be recognised.
func TestDedupeClientFoundRows(t *testing.T) {
	cfg, err := mysql.ParseDSN(testenv.DSN(t, testenv.MySQL))
	must(t, err)
	cfg.ClientFoundRows = true
	db, err := gorm.Open(mysqldriver.Open(cfg.FormatDSN()), testenv.Config())
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	checkDedupe(t, setup(t, db))
}

func checkDedupe(t *testing.T, db *gorm.DB) {
	{
		ev := outbox.Event{ID: "order-1-created", Type: "order.created", AggregateID: "1", PartitionKey: "order-1", Payload: map[string]int{"a": 1, "b": 2}}
		emit := func(events ...outbox.Event) error {
			return db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, events...) })
		}
		must(t, emit(ev))
		must(t, emit(ev))     // same content: a no-op
		must(t, emit(ev, ev)) // twice in one call too
		if n := countEvents(t, db); n != 1 {
			t.Fatalf("%d rows for one event id, want 1", n)
		}

		changed := []outbox.Event{
			{ID: ev.ID, Type: "order.updated", AggregateID: "1", PartitionKey: "order-1", Payload: ev.Payload},
			{ID: ev.ID, Type: ev.Type, AggregateID: "1", PartitionKey: "order-1", Payload: map[string]int{"a": 2}},
			{ID: ev.ID, Type: ev.Type, AggregateID: "2", PartitionKey: "order-1", Payload: ev.Payload},
			{ID: ev.ID, Type: ev.Type, AggregateID: "1", PartitionKey: "order-2", Payload: ev.Payload},
		}
		for _, c := range changed {
			err := emit(outbox.Event{Type: "other"}, c)
			if !errors.Is(err, outbox.ErrDuplicateEvent) {
				t.Errorf("re-emit with changed content: err = %v, want ErrDuplicateEvent", err)
			}
		}
		if n := countEvents(t, db); n != 1 {
			t.Errorf("%d rows after refused duplicates, want 1", n)
		}

		// Ids are case-sensitive on every dialect (MySQL's default collation is not).
		must(t, emit(outbox.Event{ID: "ORDER-1-CREATED", Type: "order.created"}))
		if n := countEvents(t, db); n != 2 {
			t.Errorf("%d rows, want 2: ids differing in case are different events", n)
		}
	}
}

func TestDedupeConcurrentWriters(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		const writers, rounds = 8, 20
		for r := range rounds {
			id := "concurrent-" + string(rune('a'+r))
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for range writers {
				wg.Go(func() {
					errs <- db.Transaction(func(tx *gorm.DB) error {
						// A read first: under MySQL's REPEATABLE READ it fixes the
						// transaction's snapshot before the other writers commit.
						var n int64
						if err := tx.Model(&Order{}).Count(&n).Error; err != nil {
							return err
						}
						if err := tx.Create(&Order{Customer: "w"}).Error; err != nil { // a business write
							return err
						}
						return outbox.Emit(tx, outbox.Event{ID: id, Type: "same", Payload: "x"})
					})
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatalf("concurrent emit of one id: %v", err)
				}
			}
		}
		if n := countEvents(t, db, "type = ?", "same"); n != rounds {
			t.Errorf("%d rows, want %d (one per id)", n, rounds)
		}
		if n := count(t, db, &Order{}); n != writers*rounds {
			t.Errorf("%d orders, want %d: every writer's transaction commits", n, writers*rounds)
		}
	})
}

// Two transactions emitting application-chosen ids whose order
// interleaves (b, d, then c between them, then a before b) both commit:
// telling a duplicate from an insert locks no gap between ids. On MariaDB
// each transaction's check once locked the gap before its id, and the
// two inserts that followed waited for each other: a deadlock.
func TestDedupeWritersLeaveGapsFree(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		if db.Dialector.Name() == "sqlite" {
			t.Skip("one writer at a time: transactions cannot interleave")
		}
		emit := func(tx *gorm.DB, id string) error {
			return outbox.Emit(tx, outbox.Event{ID: "gaps-" + id, Type: "gaps", Payload: id})
		}
		a, b := db.Begin(), db.Begin()
		defer a.Rollback()
		defer b.Rollback()
		must(t, emit(a, "b"))
		must(t, emit(b, "d"))
		done := make(chan error, 1)
		go func() { done <- emit(a, "c") }()
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(2 * time.Second):
			b.Rollback() // let a go on
			<-done
			t.Fatal("emit of gaps-c waited for the transaction that emitted gaps-d")
		}
		must(t, emit(b, "a"))
		must(t, a.Commit().Error)
		must(t, b.Commit().Error)
		if n := countEvents(t, db, "type = ?", "gaps"); n != 4 {
			t.Errorf("%d events, want 4", n)
		}
	})
}
