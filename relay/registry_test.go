package relay_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

type (
	priceV1 struct {
		Price string `json:"price"`
	}
	priceV1Changed struct {
		Price int `json:"price"`
	}
	note struct {
		Text string `json:"text" outbox:"required"`
	}
)

// eachRegistryDB runs fn per dialect with a plugin holding reg.
func eachRegistryDB(t *testing.T, reg *outbox.Registry, fn func(t *testing.T, db *gorm.DB)) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true, Registry: reg}))
		fn(t, db)
	})
}

// An event written under a schema that has changed since is dead at the
// relay's first claim, without a publish and without retries, with the
// reason in last_error; the other events of the batch are published.
func TestSchemaChangeDeadAtOnce(t *testing.T) {
	old := outbox.NewRegistry()
	must(t, outbox.Register[priceV1](old, "price.set", 1))
	must(t, outbox.Register[note](old, "note.added", 1))
	changed := outbox.NewRegistry()
	must(t, outbox.Register[priceV1Changed](changed, "price.set", 1))
	must(t, outbox.Register[note](changed, "note.added", 1))
	eachRegistryDB(t, old, func(t *testing.T, db *gorm.DB) {
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx,
				outbox.Event{ID: "ok-1", Type: "note.added", Payload: note{"a"}},
				outbox.Event{ID: "bad", Type: "price.set", Payload: priceV1{"10"}, MaxAttempts: 5},
				outbox.Event{ID: "ok-2", Type: "note.added", Payload: note{"b"}})
		}))
		pub := newRecorder()
		var deadReason error
		r := newRelay(t, db, pub, relay.WithRegistry(changed),
			relay.WithOnDead(func(_ context.Context, _ *outbox.Envelope, reason error) { deadReason = reason }))
		res, err := r.RunOnce(t.Context())
		must(t, err)
		if res.Published != 2 || res.Dead != 1 || res.Failed != 0 {
			t.Fatalf("RunOnce: %+v, want 2 published and 1 dead", res)
		}
		if pub.count["bad"] != 0 || pub.count["ok-1"] != 1 || pub.count["ok-2"] != 1 {
			t.Errorf("published %v, want ok-1 and ok-2 only", pub.count)
		}
		row := statusOf(t, db, "bad")
		lastError := ""
		if row.LastError != nil {
			lastError = *row.LastError
		}
		if row.Status != outbox.StatusDead || row.Attempts != 1 || !strings.Contains(lastError, "registry check") ||
			!strings.Contains(lastError, "price") || !strings.Contains(lastError, "permanent") {
			t.Errorf("bad event: status %s, attempts %d, last_error %q; want dead after one attempt naming the schema failure",
				row.Status, row.Attempts, lastError)
		}
		t.Logf("last_error: %s", lastError)
		if deadReason == nil || !outbox.IsPermanent(deadReason) {
			t.Errorf("OnDead reason %v, want a Permanent registry failure", deadReason)
		}
	})
}

type (
	orderV1 struct {
		Total int `json:"total"`
	}
	orderV2 struct {
		Amount int `json:"amount"`
	}
	orderV3 struct {
		Amount   int    `json:"amount"`
		Currency string `json:"currency"`
	}
)

// A relay on a db whose plugin has a registry publishes version 1 and 2
// events upcast to version 3, with Envelope.Version 3.
func TestRelayPublishesUpcast(t *testing.T) {
	reg := outbox.NewRegistry()
	must(t, outbox.Register[orderV1](reg, "order.v", 1))
	must(t, outbox.Register[orderV2](reg, "order.v", 2))
	must(t, outbox.Register[orderV3](reg, "order.v", 3))
	must(t, outbox.RegisterUpcaster(reg, "order.v", 1, func(p json.RawMessage) (json.RawMessage, error) {
		var v orderV1
		if err := json.Unmarshal(p, &v); err != nil {
			return nil, err
		}
		return json.Marshal(orderV2{Amount: v.Total})
	}))
	must(t, outbox.RegisterUpcaster(reg, "order.v", 2, func(p json.RawMessage) (json.RawMessage, error) {
		var v orderV2
		if err := json.Unmarshal(p, &v); err != nil {
			return nil, err
		}
		return json.Marshal(orderV3{Amount: v.Amount, Currency: "EUR"})
	}))
	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx,
				outbox.Event{ID: "v1", Type: "order.v", Version: 1, Payload: orderV1{7}},
				outbox.Event{ID: "v2", Type: "order.v", Version: 2, Payload: orderV2{7}},
				outbox.Event{ID: "v3", Type: "order.v", Version: 3, Payload: orderV3{7, "EUR"}})
		}))
		pub := newRecorder()
		res, err := newRelay(t, db, pub).RunOnce(t.Context())
		must(t, err)
		if res.Published != 3 {
			t.Fatalf("RunOnce: %+v, want 3 published", res)
		}
		for _, e := range pub.deliveries {
			var got orderV3
			must(t, e.Unmarshal(&got))
			if e.Version != 3 || got != (orderV3{7, "EUR"}) {
				t.Errorf("%s delivered as v%d %+v, want v3 {7 EUR}", e.ID, e.Version, got)
			}
		}
		if row := statusOf(t, db, "v1"); row.Version != 1 {
			t.Errorf("the stored event's version changed to %d", row.Version)
		}
	})
}
