package outbox_test

import (
	"fmt"
	"log"
	"strconv"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
)

// Invoice emits invoice.issued from its AfterCreate hook.
type Invoice struct {
	ID     uint
	Amount int
}

func (i *Invoice) AfterCreate(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{
		Type:          "invoice.issued",
		AggregateType: "invoice",
		AggregateID:   strconv.Itoa(int(i.ID)),
		Payload:       i,
	})
}

// exampleDB opens a throwaway in-memory SQLite database for the examples.
func exampleDB() *gorm.DB {
	exampleDBs++
	dsn := fmt.Sprintf("file:example%d?mode=memory&cache=shared&_txlock=immediate", exampleDBs)
	db, err := gorm.Open(sqlite.Open(dsn), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	return db
}

var exampleDBs int

// Emit from a model hook: the event commits with the invoice, or not at all.
func Example() {
	db := exampleDB()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Invoice{}); err != nil {
		log.Fatal(err)
	}

	// GORM's default transaction covers the invoice and its event.
	if err := db.Create(&Invoice{Amount: 100}).Error; err != nil {
		log.Fatal(err)
	}

	// A rolled-back transaction leaves neither.
	_ = db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(&Invoice{Amount: 200}).Error; err != nil {
			return err
		}
		return fmt.Errorf("payment declined")
	})

	var rows []outbox.OutboxEvent
	db.Find(&rows)
	for _, r := range rows {
		fmt.Println(r.Type, r.AggregateID, r.Status, string(r.Payload))
	}
	// Output: invoice.issued 1 pending {"ID":1,"Amount":100}
}

// Emit inside db.Transaction, next to the business writes.
func ExampleEmit() {
	db := exampleDB()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	err := db.Transaction(func(tx *gorm.DB) error {
		// ... business writes through tx ...
		return outbox.Emit(tx, outbox.Event{
			ID:           "payment-42-captured", // a dedupe key: emitting it again is a no-op
			Type:         "payment.captured",
			PartitionKey: "customer-7", // delivered in commit order with the customer's other events
			Payload:      map[string]any{"payment": 42, "amount": 1999},
		})
	})
	fmt.Println(err)

	// Outside a transaction nothing is written.
	fmt.Println(outbox.Emit(db, outbox.Event{Type: "payment.captured"}))
	// Output:
	// <nil>
	// outbox: not in a transaction
}

// Ledger is an aggregate: it records events as its methods run, and the
// plugin writes them when it is saved.
type Ledger struct {
	ID      uint
	Balance int
	outbox.Recorder
}

func (a *Ledger) Deposit(amount int) {
	a.Balance += amount
	a.Record(outbox.Event{Type: "ledger.credited", Payload: map[string]int{"amount": amount}})
}

func ExampleRecorder() {
	db := exampleDB()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Ledger{}); err != nil {
		log.Fatal(err)
	}

	ledger := &Ledger{}
	ledger.Deposit(10)
	ledger.Deposit(5)
	if err := db.Save(ledger).Error; err != nil { // writes both events in the save's transaction
		log.Fatal(err)
	}
	fmt.Println("still recorded:", len(ledger.RecordedEvents()))

	var n int64
	db.Model(&outbox.OutboxEvent{}).Where("type = ?", "ledger.credited").Count(&n)
	fmt.Println("written:", n)
	// Output:
	// still recorded: 0
	// written: 2
}
