package outboxtest_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/outboxtest"
	"github.com/gormoutbox/outbox/relay"
)

// Invoice emits invoice.issued when it is created: the unit of work the
// examples test.
type Invoice struct {
	ID       uint `gorm:"primaryKey"`
	Customer string
	Amount   int
}

func (i *Invoice) AfterCreate(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{
		Type:          "invoice.issued",
		AggregateType: "invoice",
		AggregateID:   fmt.Sprint(i.ID),
		PartitionKey:  "customer:" + i.Customer,
		Payload:       map[string]any{"customer": i.Customer, "amount": i.Amount},
	})
}

// A test asserts what a unit of work emitted, then runs the handlers.
func Example() {
	// In a real test, t is the test's *testing.T.
	t := &testing.T{}
	// A database of the test's own, with the outbox and the Invoice table:
	// a SQLite file unless OUTBOXTEST_DATABASE names a server.
	db := outboxtest.DB(t, outboxtest.AutoMigrate(&Invoice{}))

	// The unit of work under test.
	db.Create(&Invoice{Customer: "ada", Amount: 120})

	env := outboxtest.RequireEmitted(t, db, outbox.Event{
		Type:        "invoice.issued",
		AggregateID: "1",
		Payload:     map[string]any{"amount": 120, "customer": "ada"}, // compared as JSON
	})
	fmt.Println("emitted", env.Type, "for", env.AggregateType, env.AggregateID, "key", env.PartitionKey)

	// Run the application's handlers, synchronously.
	store, _ := idempotency.NewStore(db) // its table: migrated by outboxtest.DB
	mux := inproc.NewMux(store)
	_ = mux.Handle("invoice.issued", "mail", consume.HandlerOf(func(ctx context.Context, p struct{ Customer string }) error {
		fmt.Println("mailing the invoice to", p.Customer)
		return nil
	}))
	res := outboxtest.Drain(t, db, mux)
	fmt.Printf("%+v\n", res)
	fmt.Println(len(outboxtest.Emitted(t, db, outboxtest.Status(outbox.StatusPublished))), "published")
	// Output:
	// emitted invoice.issued for invoice 1 key customer:ada
	// mailing the invoice to ada
	// {Claimed:1 Published:1 Failed:0 Dead:0 Released:0 Lost:0 Abandoned:0 Rescued:0}
	// 1 published
}

// Inside a transaction that has not committed, the helpers see its events:
// a test may run in a transaction that it rolls back.
func ExampleRequireEmitted_transaction() {
	t := &testing.T{}
	db := outboxtest.DB(t, outboxtest.AutoMigrate(&Invoice{}))

	_ = db.Transaction(func(tx *gorm.DB) error {
		tx.Create(&Invoice{Customer: "bob", Amount: 80})
		env := outboxtest.RequireEmitted(t, tx, outbox.Event{Type: "invoice.issued"},
			outboxtest.PayloadSubset(map[string]any{"amount": 80})) // only the keys given
		fmt.Println("in the transaction:", env.Type, env.AggregateID)
		return errors.New("roll back")
	})
	outboxtest.RequireNotEmitted(t, db, outbox.Event{Type: "invoice.issued"})
	fmt.Println("after the rollback: none")
	// Output:
	// in the transaction: invoice.issued 1
	// after the rollback: none
}

// Everything a unit of work emitted, in order, and nothing else: Mark
// where it starts.
func ExampleRequireEmittedMany() {
	t := &testing.T{}
	db := outboxtest.DB(t, outboxtest.AutoMigrate(&Invoice{}))
	db.Create(&Invoice{Customer: "ada", Amount: 10}) // fixtures

	p := outboxtest.Mark(t, db)
	_ = db.Transaction(func(tx *gorm.DB) error { // the unit of work under test
		if err := tx.Create(&Invoice{Customer: "cy", Amount: 30}).Error; err != nil {
			return err
		}
		return outbox.Emit(tx, outbox.Event{Type: "customer.billed", AggregateID: "cy"})
	})

	envs := outboxtest.RequireEmittedMany(t, db, []outbox.Event{
		{Type: "invoice.issued", PartitionKey: "customer:cy"},
		{Type: "customer.billed", AggregateID: "cy"},
	}, outboxtest.Since(p))
	for _, e := range envs {
		fmt.Println(e.Type, e.AggregateID)
	}
	// Output:
	// invoice.issued 2
	// customer.billed cy
}

// Emitted returns what the filters keep, for assertions of your own.
func ExampleEmitted() {
	t := &testing.T{}
	db := outboxtest.DB(t, outboxtest.AutoMigrate(&Invoice{}))
	for _, amount := range []int{10, 250, 40, 900} {
		db.Create(&Invoice{Customer: "ada", Amount: amount})
	}

	large := outboxtest.Emitted(t, db,
		outboxtest.Type("invoice.issued"),
		outboxtest.PayloadWhere("over 100", func(p struct{ Amount int }) bool { return p.Amount > 100 }),
	)
	for _, e := range large {
		fmt.Println("large invoice", e.AggregateID)
	}
	// Output:
	// large invoice 2
	// large invoice 4
}

// A test of a failing handler: AllowFailures keeps the dead letter from
// failing the test, and relay options make it give up sooner.
func ExampleDrain_failures() {
	t := &testing.T{}
	db := outboxtest.DB(t, outboxtest.AutoMigrate(&Invoice{}))
	db.Create(&Invoice{Customer: "dan", Amount: 5})

	broken := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
		return fmt.Errorf("mail server refused attempt %d", e.Attempt)
	})
	res := outboxtest.Drain(t, db, broken,
		outboxtest.AllowFailures(),
		outboxtest.RelayOptions(relay.WithMaxAttempts(3)),
	)
	fmt.Printf("%+v\n", res)

	dead := outboxtest.RequireEmitted(t, db, outbox.Event{Type: "invoice.issued"}, outboxtest.Status(outbox.StatusDead))
	fmt.Println("dead after", dead.Attempt, "attempts")
	// Output:
	// {Claimed:3 Published:0 Failed:2 Dead:1 Released:0 Lost:0 Abandoned:0 Rescued:0}
	// dead after 3 attempts
}
