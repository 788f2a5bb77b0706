package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func TestEmitCommitsWithTransaction(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		order := Order{Customer: "ada", Amount: 42}
		must(t, db.Transaction(func(tx *gorm.DB) error { return tx.Create(&order).Error }))

		rows := events(t, db)
		if len(rows) != 1 {
			t.Fatalf("got %d events, want 1", len(rows))
		}
		e := rows[0]
		if e.Type != "order.created" || e.AggregateType != "order" || e.AggregateID != strconv.Itoa(int(order.ID)) {
			t.Errorf("event = %+v", e)
		}
		if e.Status != outbox.StatusPending || e.Attempts != 0 || e.Version != 1 || e.ClaimVersion != 0 {
			t.Errorf("status %q attempts %d version %d claim_version %d", e.Status, e.Attempts, e.Version, e.ClaimVersion)
		}
		if len(e.EventID) != 36 {
			t.Errorf("event_id %q is not a UUID", e.EventID)
		}
		var payload Order
		must(t, json.Unmarshal(e.Payload, &payload))
		if payload.Customer != "ada" || payload.Amount != 42 || payload.ID != order.ID {
			t.Errorf("payload = %s", e.Payload)
		}
		if age := time.Since(e.AvailableAt); age < -time.Minute || age > time.Minute {
			t.Errorf("available_at %v is not about now", e.AvailableAt)
		}
	})
}

func TestDefaultTransactionIsAtomic(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Create(&Order{Customer: "ok"}).Error)
		err := db.Create(&Order{Customer: "bad", FailAfterEmit: true}).Error
		if !errors.Is(err, errHook) {
			t.Fatalf("Create error = %v, want the hook's", err)
		}
		if n := count(t, db, &Order{}); n != 1 {
			t.Errorf("%d orders, want 1", n)
		}
		if n := countEvents(t, db); n != 1 {
			t.Errorf("%d events, want 1 (the failed create's event must roll back)", n)
		}
	})
}

func TestRollbackRemovesEvents(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		cases := []struct {
			name string
			run  func(db *gorm.DB) error
		}{
			{"hook error", func(db *gorm.DB) error {
				return db.Transaction(func(tx *gorm.DB) error {
					return tx.Create(&Order{FailAfterEmit: true}).Error
				})
			}},
			{"later statement error", func(db *gorm.DB) error {
				return db.Transaction(func(tx *gorm.DB) error {
					if err := tx.Create(&Order{Customer: "first"}).Error; err != nil {
						return err
					}
					return tx.Exec("INSERT INTO no_such_table VALUES (1)").Error
				})
			}},
			{"function error after emit", func(db *gorm.DB) error {
				return db.Transaction(func(tx *gorm.DB) error {
					if err := outbox.Emit(tx, outbox.Event{Type: "direct"}); err != nil {
						return err
					}
					return errors.New("changed my mind")
				})
			}},
			{"panic", func(db *gorm.DB) (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = errors.New("panicked")
					}
				}()
				return db.Transaction(func(tx *gorm.DB) error {
					if err := tx.Create(&Order{Customer: "p"}).Error; err != nil {
						return err
					}
					panic("boom")
				})
			}},
			{"rolled back nested transaction", func(db *gorm.DB) error {
				return db.Transaction(func(tx *gorm.DB) error {
					_ = tx.Transaction(func(tx2 *gorm.DB) error {
						if err := tx2.Create(&Order{Customer: "nested"}).Error; err != nil {
							return err
						}
						return errors.New("roll back to the savepoint")
					})
					return outbox.Emit(tx, outbox.Event{Type: "kept"})
				})
			}},
			{"rolled back savepoint", func(db *gorm.DB) error {
				return db.Transaction(func(tx *gorm.DB) error {
					if err := tx.SavePoint("sp1").Error; err != nil {
						return err
					}
					if err := tx.Create(&Order{Customer: "sp"}).Error; err != nil {
						return err
					}
					return tx.RollbackTo("sp1").Error
				})
			}},
		}
		for _, c := range cases {
			before := countEvents(t, db)
			beforeKept := countEvents(t, db, "type = ?", "kept")
			err := c.run(db)
			got := countEvents(t, db) - before
			kept := countEvents(t, db, "type = ?", "kept") - beforeKept
			switch c.name {
			case "rolled back nested transaction":
				if err != nil || got != 1 || kept != 1 {
					t.Errorf("%s: err %v, %d new events (%d kept), want only the outer event", c.name, err, got, kept)
				}
			case "rolled back savepoint":
				if err != nil || got != 0 {
					t.Errorf("%s: err %v, %d new events, want 0", c.name, err, got)
				}
			default:
				if err == nil || got != 0 {
					t.Errorf("%s: err %v, %d new events, want an error and 0", c.name, err, got)
				}
			}
		}
		if n := count(t, db, &Order{}); n != 0 {
			t.Errorf("%d orders survived the rollbacks", n)
		}
	})
}

// With SkipDefaultTransaction, GORM writes a row in autocommit. The plugin
// opens the transaction GORM skipped for statements of models whose hooks
// may emit or that record events: never a row without its event. Both ways
// of skipping it are tested: in gorm.Config and in a Session.
func TestSkipDefaultTransaction(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			cfg := testenv.Config()
			cfg.SkipDefaultTransaction = true
			t.Run("config", func(t *testing.T) { checkSkipDefaultTransaction(t, setup(t, testenv.OpenConfig(t, d, cfg))) })
			t.Run("session", func(t *testing.T) {
				db := setup(t, testenv.Open(t, d))
				checkSkipDefaultTransaction(t, db.Session(&gorm.Session{SkipDefaultTransaction: true}))
			})
		})
	}
}

func checkSkipDefaultTransaction(t *testing.T, db *gorm.DB) {
	// Emit from a hook: the row and its event commit together.
	must(t, db.Create(&Order{Customer: "no default tx"}).Error)
	if n, e := count(t, db, &Order{}), countEvents(t, db); n != 1 || e != 1 {
		t.Fatalf("%d orders and %d events, want 1 and 1", n, e)
	}
	// A hook that fails after emitting rolls back the row and the event.
	if err := db.Create(&Order{Customer: "fails", FailAfterEmit: true}).Error; !errors.Is(err, errHook) {
		t.Fatalf("err = %v, want the hook's", err)
	}
	if n, e := count(t, db, &Order{}), countEvents(t, db); n != 1 || e != 1 {
		t.Fatalf("%d orders and %d events after a failing hook, want 1 and 1", n, e)
	}

	// Recorder: written with the row; an invalid event writes neither.
	acc := Account{Owner: "x"}
	acc.Record(outbox.Event{Type: "account.opened"})
	must(t, db.Create(&acc).Error)
	assertEvents(t, db, "account.opened", 1)
	if len(acc.RecordedEvents()) != 0 {
		t.Errorf("events still recorded after the committed create")
	}
	bad := Account{Owner: "bad"}
	bad.Record(outbox.Event{Type: "ok"}, outbox.Event{})
	if err := db.Create(&bad).Error; !errors.Is(err, outbox.ErrInvalidEvent) {
		t.Fatalf("err = %v, want ErrInvalidEvent", err)
	}
	if n := count(t, db, &Account{}, "owner = ?", "bad"); n != 0 {
		t.Errorf("the aggregate was written (%d rows) although its events were not", n)
	}

	// Update, Save and Delete too.
	s := Shipment{Status: "new"}
	must(t, db.Create(&s).Error)
	must(t, db.Model(&s).Update("status", "sent").Error)
	must(t, db.Delete(&s).Error)
	assertEvents(t, db, "shipment.deleted", 1)

	// Emit outside any transaction still writes nothing.
	if err := outbox.Emit(db, outbox.Event{Type: "x"}); !errors.Is(err, outbox.ErrNotInTransaction) {
		t.Errorf("Emit(db): err = %v, want ErrNotInTransaction", err)
	}
	assertEvents(t, db, "x", 0)

	// Inside an explicit transaction nothing changes.
	must(t, db.Transaction(func(tx *gorm.DB) error { return tx.Create(&Order{Customer: "tx"}).Error }))
	assertEvents(t, db, "order.created", 2)
}

func TestPrepareStmt(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		prep := db.Session(&gorm.Session{PrepareStmt: true})
		for range 3 { // the second and third runs use the prepared statements
			must(t, prep.Create(&Order{Customer: "p"}).Error)
			must(t, prep.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(&Order{Customer: "q"}).Error; err != nil {
					return err
				}
				return outbox.Emit(tx, outbox.Event{Type: "direct"})
			}))
		}
		_ = prep.Transaction(func(tx *gorm.DB) error {
			_ = tx.Create(&Order{Customer: "r"})
			return errors.New("rollback")
		})
		if n := countEvents(t, db); n != 9 {
			t.Errorf("%d events, want 9", n)
		}
	})
}

func TestHooksOnUpdateSaveDelete(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		s := Shipment{Status: "new"}
		must(t, db.Create(&s).Error) // AfterSave
		s.Status = "sent"
		must(t, db.Save(&s).Error) // AfterUpdate + AfterSave
		must(t, db.Model(&s).Update("status", "delivered").Error)
		must(t, db.Delete(&s).Error)

		var types []string
		for _, e := range events(t, db) {
			types = append(types, e.Type)
		}
		want := []string{"shipment.saved", "shipment.updated", "shipment.saved", "shipment.updated", "shipment.saved", "shipment.deleted"}
		if len(types) != len(want) {
			t.Fatalf("events %v, want %v", types, want)
		}
		for i := range want {
			if types[i] != want[i] {
				t.Fatalf("events %v, want %v", types, want)
			}
		}
	})
}

func TestDryRunWritesNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		dry := db.Session(&gorm.Session{DryRun: true})
		_ = dry.Create(&Order{Customer: "dry"}).Error
		acc := Account{Owner: "dry"}
		acc.Deposit(1)
		_ = dry.Create(&acc).Error
		if n := countEvents(t, db); n != 0 {
			t.Errorf("%d events written by a dry run", n)
		}
	})
}

func TestEmitWithoutPlugin(t *testing.T) {
	db := setup(t, openSQLite(t))
	bare, err := gorm.Open(db.Dialector, &gorm.Config{})
	must(t, err)
	err = bare.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{Type: "x"}) })
	if !errors.Is(err, outbox.ErrNotRegistered) {
		t.Errorf("err = %v, want ErrNotRegistered", err)
	}
}

// Audited writes another row through its hook's tx between two Emits.
// tx.WithContext clones the hook's statement, Settings included: the
// nested statement must neither write nor commit the outer statement's
// events.
type Audited struct {
	ID   uint
	Fail bool `gorm:"-"`
}

func (a *Audited) AfterCreate(tx *gorm.DB) error {
	if err := outbox.Emit(tx, outbox.Event{Type: "audited.first"}); err != nil {
		return err
	}
	if err := tx.WithContext(context.Background()).Table("audit_notes").Create(map[string]any{"note": "n"}).Error; err != nil {
		return err
	}
	if err := outbox.Emit(tx, outbox.Event{Type: "audited.second"}); err != nil {
		return err
	}
	if a.Fail {
		return errHook
	}
	return nil
}

func TestHookWritesThroughItsTx(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			for name, skip := range map[string]bool{"default": false, "skip default transaction": true} {
				t.Run(name, func(t *testing.T) {
					cfg := testenv.Config()
					cfg.SkipDefaultTransaction = skip
					db := setup(t, testenv.OpenConfig(t, d, cfg))
					must(t, db.AutoMigrate(&Audited{}))
					must(t, db.Exec("CREATE TABLE audit_notes (note VARCHAR(10))").Error)
					if err := db.Create(&Audited{Fail: true}).Error; !errors.Is(err, errHook) {
						t.Fatalf("err = %v, want the hook's", err)
					}
					if a, n, e := count(t, db, &Audited{}), count(t, db.Table("audit_notes"), nil), countEvents(t, db); a+n+e != 0 {
						t.Fatalf("%d rows, %d notes and %d events after a failed create, want none", a, n, e)
					}
					must(t, db.Create(&Audited{}).Error)
					assertEvents(t, db, "audited.first", 1)
					assertEvents(t, db, "audited.second", 1)
				})
			}
		})
	}
}

// One Emit of more distinct partition keys than one statement has bind
// parameters (PostgreSQL and MySQL allow 65,535; the key locks took one
// per key, two on PostgreSQL) commits every event: the key locks are split
// like the INSERTs.
func TestEmitOfManyPartitionKeys(t *testing.T) {
	const n = 66000
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		evs := make([]outbox.Event, n)
		for i := range evs {
			evs[i] = outbox.Event{Type: "key.many", PartitionKey: "k" + strconv.Itoa(i), Payload: []byte(`{}`)}
		}
		must(t, db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, evs...) }))
		if got := countEvents(t, db); got != n {
			t.Fatalf("%d events committed, want %d", got, n)
		}
	})
}
