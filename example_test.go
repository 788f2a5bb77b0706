package outbox_test

import (
	"fmt"
	"log"
	"strconv"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
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
	db, err := gorm.Open(testenv.SQLiteDialector(dsn), &gorm.Config{Logger: logger.Discard})
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

// Payment announces each change of its status. GORM's Statement.Changed
// compares the values being written with the model's current ones, so it
// is only meaningful before the UPDATE runs: in AfterUpdate it is always
// false. BeforeUpdate therefore notes the change in the statement's
// Settings (shared by all hooks of one statement; tx.Set would be lost),
// and AfterUpdate, which runs only if the UPDATE succeeded, emits.
type Payment struct {
	ID     uint
	Status string
}

// statusChanged is the Settings key under which BeforeUpdate notes the old
// status.
type statusChanged struct{}

func (p *Payment) BeforeUpdate(tx *gorm.DB) error {
	if tx.Statement.Changed("Status") {
		tx.Statement.Settings.Store(statusChanged{}, p.Status) // still the old value here
	}
	return nil
}

func (p *Payment) AfterUpdate(tx *gorm.DB) error {
	old, ok := tx.Statement.Settings.Load(statusChanged{})
	if !ok {
		return nil
	}
	return outbox.Emit(tx, outbox.Event{
		Type:          "payment." + p.Status, // the new value, assigned by the update
		AggregateType: "payment",
		AggregateID:   strconv.Itoa(int(p.ID)),
		Payload:       map[string]string{"from": old.(string), "to": p.Status},
	})
}

// Announce a state change from hooks: note it in BeforeUpdate, emit it in
// AfterUpdate. Update through db.Model(&p): with db.Save(&p) the values
// written are the model's own, and Changed reports nothing.
func ExampleEmit_stateChange() {
	db := exampleDB()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Payment{}); err != nil {
		log.Fatal(err)
	}
	check := func(tx *gorm.DB) {
		if tx.Error != nil {
			log.Fatal(tx.Error)
		}
	}
	p := Payment{Status: "pending"}
	check(db.Create(&p))
	check(db.Model(&p).Update("status", "paid"))                      // announced
	check(db.Model(&p).Update("status", "paid"))                      // no change: nothing
	check(db.Model(&p).Updates(Payment{Status: "refunded"}))          // announced
	check(db.Model(&p).Updates(map[string]any{"status": "refunded"})) // no change: nothing

	var rows []outbox.OutboxEvent
	db.Order("id").Find(&rows)
	for _, r := range rows {
		fmt.Println(r.Type, string(r.Payload))
	}
	// Output:
	// payment.paid {"from":"pending","to":"paid"}
	// payment.refunded {"from":"paid","to":"refunded"}
}
