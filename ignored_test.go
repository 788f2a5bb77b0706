package outbox_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// Careless emits from its hooks and ignores Emit's error.
type Careless struct {
	ID     uint
	Name   string
	Before []outbox.Event `gorm:"-"` // emitted by BeforeCreate
	After  []outbox.Event `gorm:"-"` // emitted by AfterCreate
}

func (c *Careless) BeforeCreate(tx *gorm.DB) error {
	_ = outbox.Emit(tx, c.Before...)
	return nil
}

func (c *Careless) AfterCreate(tx *gorm.DB) error {
	_ = outbox.Emit(tx, c.After...)
	return nil
}

var tooBig = make([]byte, 2<<20) // over the default payload limit

// An Emit that fails fails its statement, whatever the hook does with the
// error: the row is not written.
func TestIgnoredEmitErrorFailsTheStatement(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&Careless{}))
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{ID: "taken", Type: "t", Payload: "one"})
		}))
		cases := []struct {
			name string
			row  Careless
			want error
		}{
			{"invalid in AfterCreate", Careless{After: []outbox.Event{{Type: "ok"}, {}}}, outbox.ErrInvalidEvent},
			{"invalid in BeforeCreate", Careless{Before: []outbox.Event{{}}}, outbox.ErrInvalidEvent},
			{"payload too large", Careless{After: []outbox.Event{{Type: "big", Payload: tooBig}}}, outbox.ErrInvalidEvent},
			{"duplicate id", Careless{After: []outbox.Event{{ID: "taken", Type: "t", Payload: "two"}}}, outbox.ErrDuplicateEvent},
		}
		for _, c := range cases {
			row := c.row
			row.Name = c.name
			if err := db.Create(&row).Error; !errors.Is(err, c.want) {
				t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
			}
			if n := count(t, db, &Careless{}, "name = ?", c.name); n != 0 {
				t.Errorf("%s: the row was committed although its event was not", c.name)
			}
			// The same inside db.Transaction whose function returns nil.
			row = c.row
			row.Name = c.name + " in tx"
			err := db.Transaction(func(tx *gorm.DB) error {
				_ = tx.Create(&row) // the error is ignored too
				return nil
			})
			if err == nil {
				t.Errorf("%s in tx: the transaction succeeded", c.name)
			}
			if n := count(t, db, &Careless{}, "name = ?", row.Name); n != 0 {
				t.Errorf("%s in tx: the row was committed although its event was not", c.name)
			}
		}
		if n := countEvents(t, db); n != 1 {
			t.Errorf("%d events, want only the first", n)
		}
	})
}

// Emit directly inside db.Transaction, its error ignored: the transaction
// cannot commit.
func TestIgnoredEmitErrorInTransaction(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{ID: "taken", Type: "t", Payload: "one"})
		}))
		for name, bad := range map[string]outbox.Event{
			"invalid":         {},
			"payload too big": {Type: "big", Payload: tooBig},
			"duplicate id":    {ID: "taken", Type: "t", Payload: "two"},
		} {
			err := db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(&Shipment{Status: name}).Error; err != nil {
					return err
				}
				_ = outbox.Emit(tx, bad)
				return nil
			})
			if err == nil {
				t.Errorf("%s: the transaction committed", name)
			}
			if n := count(t, db, &Shipment{}, "status = ?", name); n != 0 {
				t.Errorf("%s: the business row was committed without its event", name)
			}
		}
		if n := countEvents(t, db); n != 1 {
			t.Errorf("%d events, want only the first", n)
		}
	})
}
