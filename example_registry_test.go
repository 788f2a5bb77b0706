package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// OrderCreated is the payload of order.created version 2: the tenant
// field must match the event's TenantID, and order_id is required.
type OrderCreated struct {
	OrderID  string `json:"order_id" outbox:"required"`
	Tenant   string `json:"tenant" outbox:"tenant"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// A strict registry: events of unregistered types, and payloads that do
// not match their registered type, are refused in the caller's
// transaction.
func ExampleRegister() {
	reg := outbox.NewRegistry()
	if err := outbox.Register[OrderCreated](reg, "order.created", 2,
		outbox.Validate(func(o OrderCreated) error {
			if o.Amount <= 0 {
				return errors.New("amount must be positive")
			}
			return nil
		})); err != nil {
		log.Fatal(err)
	}
	db := exampleDB()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true, Registry: reg}); err != nil {
		log.Fatal(err)
	}
	emit := func(e outbox.Event) error {
		return db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, e) })
	}

	fmt.Println(emit(outbox.Event{Type: "order.created", Version: 2, TenantID: "acme",
		Payload: OrderCreated{OrderID: "o-1", Tenant: "acme", Amount: 10, Currency: "EUR"}}))
	fmt.Println(emit(outbox.Event{Type: "order.created", Version: 2, TenantID: "acme",
		Payload: OrderCreated{OrderID: "o-2", Tenant: "globex", Amount: 10}}))
	fmt.Println(emit(outbox.Event{Type: "order.created", Version: 2, TenantID: "acme",
		Payload: json.RawMessage(`{"order_id":"o-3","tenant":"acme","amount":"ten"}`)}))
	fmt.Println(emit(outbox.Event{Type: "order.cancelled", Payload: map[string]string{"order_id": "o-1"}}))
	// Output:
	// <nil>
	// outbox: invalid event: TenantID: is "acme" but the payload's tenant is "globex" (order.created v2)
	// outbox: invalid event: Payload: does not match order.created v2 (outbox_test.OrderCreated): json: cannot unmarshal string into Go struct field OrderCreated.amount of type int
	// outbox: invalid event: Type: "order.cancelled" version 1 is not registered
}

// An upcaster turns version 1 payloads into version 2: a relay (or a
// consumer helper) given the registry delivers old events as version 2.
func ExampleRegisterUpcaster() {
	reg := outbox.NewRegistry()
	_ = outbox.Register[OrderCreated](reg, "order.created", 2)
	_ = outbox.RegisterUpcaster(reg, "order.created", 1, func(v1 json.RawMessage) (json.RawMessage, error) {
		var old struct {
			ID     string `json:"id"`
			Tenant string `json:"tenant"`
			Cents  int    `json:"cents"`
		}
		if err := json.Unmarshal(v1, &old); err != nil {
			return nil, err
		}
		return json.Marshal(OrderCreated{OrderID: old.ID, Tenant: old.Tenant, Amount: old.Cents, Currency: "EUR"})
	})

	env := &outbox.Envelope{ID: "e1", Type: "order.created", Version: 1, TenantID: "acme",
		Payload: []byte(`{"id":"o-1","tenant":"acme","cents":250}`)}
	if err := reg.Check(env); err != nil { // upcast, then checked as version 2
		log.Fatal(err)
	}
	fmt.Println(env.Version, string(env.Payload))
	// Output:
	// 2 {"order_id":"o-1","tenant":"acme","amount":250,"currency":"EUR"}
}

// Request metadata travels with the context into every event's headers; a
// registry can require it.
func ExampleWithMetadata() {
	reg := outbox.NewRegistry(outbox.Lenient(), outbox.RequireMetadata(outbox.MetadataActor))
	db := exampleDB()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true, Registry: reg}); err != nil {
		log.Fatal(err)
	}
	emit := func(ctx context.Context) error {
		return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{Type: "audit.viewed"})
		})
	}
	fmt.Println(emit(context.Background()))

	// In an HTTP middleware, say:
	ctx := outbox.WithMetadata(context.Background(), outbox.Metadata{
		Tenant: "acme", Actor: "user:42", RequestID: "req-7", CorrelationID: "corr-1"})
	fmt.Println(emit(ctx))

	var row outbox.OutboxEvent
	db.First(&row)
	fmt.Println(row.TenantID, string(row.Headers))
	// Output:
	// outbox: invalid event: Headers: actor is required by the registry (outbox.WithMetadata or the header "actor"); event audit.viewed
	// <nil>
	// acme {"actor":"user:42","correlation-id":"corr-1","request-id":"req-7","tenant-id":"acme"}
}
