package outbox_test

import (
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// Order emits order.created from AfterCreate. FailAfterEmit makes the hook
// fail after emitting, to prove the event rolls back with the order.
type Order struct {
	ID            uint `gorm:"primaryKey"`
	Customer      string
	Amount        int
	Key           string `gorm:"-" json:"-"` // partition key of the emitted event
	FailAfterEmit bool   `gorm:"-" json:"-"`
}

var errHook = errors.New("hook failed")

func (o *Order) AfterCreate(tx *gorm.DB) error {
	err := outbox.Emit(tx, outbox.Event{
		Type:          "order.created",
		AggregateType: "order",
		AggregateID:   fmt.Sprint(o.ID),
		PartitionKey:  o.Key,
		Payload:       o,
	})
	if err != nil {
		return err
	}
	if o.FailAfterEmit {
		return errHook
	}
	return nil
}

// Shipment emits from AfterSave, AfterUpdate and AfterDelete.
type Shipment struct {
	ID     uint `gorm:"primaryKey"`
	Status string
}

func (s *Shipment) AfterSave(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{Type: "shipment.saved", AggregateID: fmt.Sprint(s.ID)})
}

func (s *Shipment) AfterUpdate(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{Type: "shipment.updated", AggregateID: fmt.Sprint(s.ID)})
}

func (s *Shipment) AfterDelete(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{Type: "shipment.deleted", AggregateID: fmt.Sprint(s.ID)})
}

// Account records events on itself (the aggregate pattern).
type Account struct {
	ID      uint `gorm:"primaryKey"`
	Owner   string
	Balance int
	outbox.Recorder
}

func (a *Account) Deposit(n int) {
	a.Balance += n
	a.Record(outbox.Event{Type: "account.deposited", AggregateType: "account", AggregateID: fmt.Sprint(a.ID), Payload: map[string]int{"amount": n}})
}

// setup installs the plugin, migrates the outbox and the test models.
func setup(t *testing.T, db *gorm.DB) *gorm.DB {
	t.Helper()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		t.Fatalf("db.Use: %v", err)
	}
	if err := db.AutoMigrate(&Order{}, &Shipment{}, &Account{}, &Wallet{}); err != nil {
		t.Fatalf("AutoMigrate: %v", err)
	}
	return db
}

// eachDB runs fn per dialect on a migrated database with the plugin.
func eachDB(t *testing.T, fn func(t *testing.T, db *gorm.DB)) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) { fn(t, setup(t, db)) })
}

func events(t *testing.T, db *gorm.DB) []outbox.OutboxEvent {
	t.Helper()
	var rows []outbox.OutboxEvent
	if err := db.Order("id").Find(&rows).Error; err != nil {
		t.Fatalf("reading outbox: %v", err)
	}
	return rows
}

func count(t *testing.T, db *gorm.DB, model any, where ...any) int64 {
	t.Helper()
	var n int64
	q := db.Model(model)
	if len(where) > 0 {
		q = q.Where(where[0], where[1:]...)
	}
	if err := q.Count(&n).Error; err != nil {
		t.Fatalf("count: %v", err)
	}
	return n
}

func countEvents(t *testing.T, db *gorm.DB, where ...any) int64 {
	t.Helper()
	return count(t, db, &outbox.OutboxEvent{}, where...)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var errRollback = errors.New("roll back")
