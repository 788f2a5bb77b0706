package inproc_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// OrderPlaced is the payload of "order.placed" events in the examples.
type OrderPlaced struct {
	OrderID int    `json:"order_id"`
	Email   string `json:"email"`
}

// Handlers of the decoded payload. A payload that does not decode into the
// type is a permanent failure: the relay marks the event dead at once.
// (The relay calls Publish; the example calls it directly.)
func ExampleHandlerOf() {
	// testenv.SQLiteDialector is sqlite.Open of gorm.io/driver/sqlite, or of
	// the pure-Go driver in a build without cgo.
	db, err := gorm.Open(testenv.SQLiteDialector("file:inproc-typed-example?mode=memory&cache=shared&_txlock=immediate"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if err := outbox.Migrate(db); err != nil { // every table, the idempotency records' too
		log.Fatal(err)
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		log.Fatal(err)
	}
	mux := inproc.NewMux(store)
	err = mux.Handle("order.placed", "receipt", consume.HandlerOf(func(ctx context.Context, o OrderPlaced) error {
		e, _ := consume.EnvelopeFrom(ctx)
		fmt.Printf("event %s: receipt for order %d to %s\n", e.ID, o.OrderID, o.Email)
		return nil
	}))
	if err != nil {
		log.Fatal(err)
	}
	err = mux.HandleTx("order.placed", "stats", consume.TxHandlerOf(func(ctx context.Context, tx *gorm.DB, o OrderPlaced) error {
		return tx.Exec("SELECT ?", o.OrderID).Error // writes commit with the handler's record
	}))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	fmt.Println(mux.Publish(ctx, &outbox.Envelope{ID: "evt-1", Type: "order.placed", Payload: []byte(`{"order_id":42,"email":"ann@example.com"}`)}))
	err = mux.Publish(ctx, &outbox.Envelope{ID: "evt-2", Type: "order.placed", Payload: []byte(`{"order_id":"forty-two"}`)})
	fmt.Println("bad payload:", errors.Is(err, consume.ErrBadPayload), "permanent:", outbox.IsPermanent(err))
	// Output:
	// event evt-1: receipt for order 42 to ann@example.com
	// <nil>
	// bad payload: true permanent: true
}
