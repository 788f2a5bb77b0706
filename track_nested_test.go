package outbox_test

import (
	"database/sql"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// NestBox is saved with its items; NestHooked creates an item from its
// AfterCreate hook. All three are tracked; under the registry of
// TestTrackNestedRefusalKeepsInvalidEvent, nest_item.created is not
// registered.
type NestBox struct {
	ID    uint   `gorm:"primaryKey"`
	Label string `gorm:"size:32"`
	Items []NestItem
}

type NestItem struct {
	ID        uint   `gorm:"primaryKey"`
	NestBoxID *uint  // none: an item on its own
	SKU       string `gorm:"size:32"`
}

type NestHooked struct {
	ID    uint   `gorm:"primaryKey"`
	Label string `gorm:"size:32"`
}

func (h *NestHooked) AfterCreate(tx *gorm.DB) error {
	return tx.Create(&NestItem{SKU: h.Label}).Error
}

// Issue 24, defect 9: a tracked write refused by the registry inside
// another statement (an association saved with its parent, a hook's
// create) fails the outer statement with an error wrapping
// ErrInvalidEvent, as the same write alone does, through the rollback
// GORM runs after it; nothing is written.
func TestTrackNestedRefusalKeepsInvalidEvent(t *testing.T) {
	reg := outbox.NewRegistry()
	must(t, outbox.Register[outbox.Change](reg, "nest_box.created", 1))
	must(t, outbox.Register[outbox.Change](reg, "nest_hooked.created", 1))
	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&NestBox{}, &NestItem{}, &NestHooked{}))
		for _, m := range []any{&NestBox{}, &NestItem{}, &NestHooked{}} {
			must(t, outbox.Track(db, m))
		}
		for name, write := range map[string]func() error{
			"alone":       func() error { return db.Create(&NestItem{SKU: "x"}).Error },
			"association": func() error { return db.Create(&NestBox{Label: "b", Items: []NestItem{{SKU: "x"}}}).Error },
			"hook":        func() error { return db.Create(&NestHooked{Label: "h"}).Error },
			"transaction": func() error {
				return db.Transaction(func(tx *gorm.DB) error {
					return tx.Create(&NestBox{Label: "b", Items: []NestItem{{SKU: "x"}}}).Error
				})
			},
		} {
			err := write()
			if !errors.Is(err, outbox.ErrInvalidEvent) || !strings.Contains(err.Error(), "nest_item.created") {
				t.Errorf("%s: %v, want an error wrapping ErrInvalidEvent naming nest_item.created", name, err)
			}
		}
		if n := count(t, db, &NestBox{}) + count(t, db, &NestItem{}) + count(t, db, &NestHooked{}) + countEvents(t, db); n != 0 {
			t.Errorf("%d rows and events written, want none", n)
		}
	})
}

// An Emit whose error the function ignores rolls the transaction back at
// once: db.Transaction then says so, and still wraps the Emit's error.
func TestIgnoredEmitErrorSaysRolledBack(t *testing.T) {
	reg := outbox.NewRegistry(outbox.Lenient(), outbox.RegistryLogger(slog.New(slog.DiscardHandler)))
	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		err := db.Transaction(func(tx *gorm.DB) error {
			if err := tx.Create(&Order{Customer: "c"}).Error; err != nil {
				return err
			}
			_ = outbox.Emit(tx, outbox.Event{Type: ""}) // invalid, ignored
			return nil
		})
		if !errors.Is(err, outbox.ErrInvalidEvent) || !errors.Is(err, sql.ErrTxDone) {
			t.Errorf("%v: want it to wrap ErrInvalidEvent and sql.ErrTxDone", err)
		}
		if msg := err.Error(); !strings.Contains(msg, "rolled back") || strings.HasSuffix(msg, sql.ErrTxDone.Error()) {
			t.Errorf("message %q: want it to say the transaction was rolled back, not to end with %q", msg, sql.ErrTxDone)
		}
		if n := count(t, db, &Order{}); n != 0 {
			t.Errorf("%d orders committed, want none", n)
		}
	})
}
