package outbox_test

import (
	"fmt"
	"log"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// check stands for the application's error handling in the README's
// examples.
func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// The README's first example: the plugin and its tables, then an event
// emitted in the transaction of the writes it describes.
func Example_transaction() {
	db := exampleDB()               // your *gorm.DB, from gorm.Open; check: your error handling
	check(db.Use(&outbox.Plugin{})) // once, at startup; the zero value works
	check(outbox.Migrate(db))       // the tables: or `outbox migrate`, or migrations/<dialect>/*.sql
	// The user and its event commit together, or neither does; the event goes
	// to the Topic's stream, queue or topic, in commit order per PartitionKey.
	err := db.Transaction(func(tx *gorm.DB) error {
		// ... tx.Create(&user) ...
		return outbox.Emit(tx, outbox.Event{Type: "user.signed_up", Topic: "users", PartitionKey: "user:42",
			Payload: map[string]string{"user": "42", "email": "ada@example.com"}}) // return Emit's error: never drop it
	})
	fmt.Println(err)
	// Output: <nil>
}
