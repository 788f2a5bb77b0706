package consume_test

import (
	"context"
	"fmt"
	"log"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// SignedUp is the payload of "user.signed_up" events in the examples.
type SignedUp struct {
	User  string `json:"user"`
	Email string `json:"email"`
}

// Welcome is the effect of the examples' handler: a row per user welcomed.
type Welcome struct {
	User  string `gorm:"primaryKey"`
	Email string
}

// exampleStore opens a throwaway in-memory SQLite database with the
// outbox's tables and the welcomes table, and its idempotency store.
func exampleStore() (*gorm.DB, *idempotency.Store) {
	db, err := gorm.Open(testenv.SQLiteDialector("file:consume-example?mode=memory&cache=shared&_txlock=immediate"),
		&gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if err := outbox.Migrate(db); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&Welcome{}); err != nil {
		log.Fatal(err)
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		log.Fatal(err)
	}
	return db, store
}

// A handler written once, against package consume: it runs unchanged in
// the relay's process and on every broker's consumer. Its write and its
// idempotency record commit together, so that a redelivered event has no
// second effect.
func Example() {
	db, store := exampleStore() // your *gorm.DB, and idempotency.NewStore(db)
	h := consume.IdempotentTx(store, "welcome", consume.TxHandlerOf(
		func(ctx context.Context, tx *gorm.DB, u SignedUp) error { // the payload, decoded
			return tx.Create(&Welcome{User: u.User, Email: u.Email}).Error
		}))
	// Brokers deliver at least once: the same event twice has one effect.
	e := &outbox.Envelope{ID: "evt-1", Type: "user.signed_up", Payload: []byte(`{"user":"42","email":"ada@example.com"}`)}
	fmt.Println(h.Handle(context.Background(), e), h.Handle(context.Background(), e))
	var welcomed int64
	db.Model(&Welcome{}).Count(&welcomed)
	fmt.Println("welcomed:", welcomed)
	// Output:
	// <nil> <nil>
	// welcomed: 1
}
