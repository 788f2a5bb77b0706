package inproc_test

import (
	"context"
	"encoding/json"
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

// OrderPlacedV2 is version 2 of "order.placed": the amount is in cents.
type OrderPlacedV2 struct {
	OrderID int    `json:"order_id"`
	Email   string `json:"email"`
	Cents   int    `json:"cents"`
}

// A handler written for version 2, given the registry, receives version 1
// events upcast; an event whose payload does not match its registered
// type fails permanently before any handler runs.
func ExampleRegistered() {
	reg := outbox.NewRegistry()
	_ = outbox.Register[OrderPlaced](reg, "order.placed", 1)
	_ = outbox.Register[OrderPlacedV2](reg, "order.placed", 2)
	_ = outbox.RegisterUpcaster(reg, "order.placed", 1, func(p json.RawMessage) (json.RawMessage, error) {
		var v1 OrderPlaced
		if err := json.Unmarshal(p, &v1); err != nil {
			return nil, err
		}
		return json.Marshal(OrderPlacedV2{OrderID: v1.OrderID, Email: v1.Email})
	})

	db, err := gorm.Open(testenv.SQLiteDialector("file:inproc-registry-example?mode=memory&cache=shared&_txlock=immediate"), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		log.Fatal(err)
	}
	if err := outbox.Migrate(db); err != nil {
		log.Fatal(err)
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		log.Fatal(err)
	}
	mux := inproc.NewMux(store, inproc.WithRegistry(reg))
	err = mux.Handle("order.placed", "receipt", consume.HandlerOf(func(ctx context.Context, o OrderPlacedV2) error {
		e, _ := consume.EnvelopeFrom(ctx)
		fmt.Printf("event %s (v%d): order %d, %d cents\n", e.ID, e.Version, o.OrderID, o.Cents)
		return nil
	}, consume.Registered(reg)))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	_ = mux.Publish(ctx, &outbox.Envelope{ID: "evt-1", Type: "order.placed", Version: 1, Payload: []byte(`{"order_id":42,"email":"ann@example.com"}`)})
	err = mux.Publish(ctx, &outbox.Envelope{ID: "evt-2", Type: "order.placed", Version: 2, Payload: []byte(`{"order_id":43,"cents":"many"}`)})
	fmt.Println(outbox.IsPermanent(err), err)
	// Output:
	// event evt-1 (v2): order 42, 0 cents
	// true permanent: consume: payload does not decode: event evt-2 (order.placed v2): outbox: invalid event: Payload: does not match order.placed v2 (inproc_test.OrderPlacedV2): json: cannot unmarshal string into Go struct field OrderPlacedV2.cents of type int
}
