package outboxredis_test

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
)

// OrderPlaced is the payload of "order.placed" events in the examples.
type OrderPlaced struct {
	OrderID int    `json:"order_id"`
	Email   string `json:"email"`
}

// A handler of the decoded payload. A payload that does not decode into
// the type is a permanent failure: the message is dead at once. (Called
// directly here; a Consumer calls it for each message.)
func ExampleHandlerOf() {
	h := outboxredis.HandlerOf(func(ctx context.Context, o OrderPlaced) error {
		e, _ := outboxredis.EnvelopeFrom(ctx)
		fmt.Printf("event %s: receipt for order %d to %s\n", e.ID, o.OrderID, o.Email)
		return nil
	})
	ctx := context.Background()
	fmt.Println(h.Handle(ctx, &outbox.Envelope{ID: "evt-1", Type: "order.placed", Payload: []byte(`{"order_id":42,"email":"ann@example.com"}`)}))

	err := h.Handle(ctx, &outbox.Envelope{ID: "evt-2", Type: "order.placed", Payload: []byte(`["not", "an", "order"]`)})
	fmt.Println("bad payload:", errors.Is(err, outboxredis.ErrBadPayload), "permanent:", outbox.IsPermanent(err))
	fmt.Println(err)
	// Output:
	// event evt-1: receipt for order 42 to ann@example.com
	// <nil>
	// bad payload: true permanent: true
	// permanent: outboxredis: payload does not decode: event evt-2 (order.placed) into outboxredis_test.OrderPlaced: json: cannot unmarshal array into Go value of type outboxredis_test.OrderPlaced
}

// A typed handler whose writes commit with its idempotency record, and
// that reads which counted attempt it is on. (Needs Redis and a database.)
func ExampleTxHandlerOf() {
	_, store := exampleStore("file:stats.db?_txlock=immediate&_busy_timeout=5000")
	h := outboxredis.IdempotentTx(store, "customer-stats", outboxredis.TxHandlerOf(func(ctx context.Context, tx *gorm.DB, o OrderPlaced) error {
		if d, _ := outboxredis.DeliveryFrom(ctx); d.LastAttempt() {
			// A failure now makes the message dead (WithMaxDeliveries).
			_ = d
		}
		return tx.Exec("UPDATE customers SET orders = orders + 1 WHERE email = ?", o.Email).Error
	}))
	_ = h // outboxredis.NewConsumer(rdb, "shop:orders", "stats", hostname, h).Run(ctx)
}
