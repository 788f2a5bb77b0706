package outbox_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// Order payloads of three versions: v2 renamed total to amount, v3 added
// a currency.
type (
	orderV1 struct {
		Total int `json:"total"`
	}
	orderV2 struct {
		Amount int `json:"amount"`
	}
	orderV3 struct {
		Amount   int    `json:"amount"`
		Currency string `json:"currency" outbox:"required"`
	}
)

// upcastRegistry registers order.v versions 1 to 3 and the upcasters
// between them.
func upcastRegistry(t testing.TB) *outbox.Registry {
	must := func(t testing.TB, err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	reg := outbox.NewRegistry()
	must(t, outbox.Register[orderV1](reg, "order.v", 1))
	must(t, outbox.Register[orderV2](reg, "order.v", 2))
	must(t, outbox.Register[orderV3](reg, "order.v", 3))
	must(t, outbox.RegisterUpcaster(reg, "order.v", 1, func(p json.RawMessage) (json.RawMessage, error) {
		var v1 orderV1
		if err := json.Unmarshal(p, &v1); err != nil {
			return nil, err
		}
		return json.Marshal(orderV2{Amount: v1.Total})
	}))
	must(t, outbox.RegisterUpcaster(reg, "order.v", 2, func(p json.RawMessage) (json.RawMessage, error) {
		var v2 orderV2
		if err := json.Unmarshal(p, &v2); err != nil {
			return nil, err
		}
		return json.Marshal(orderV3{Amount: v2.Amount, Currency: "EUR"})
	}))
	return reg
}

func TestRegistryUpcast(t *testing.T) {
	reg := upcastRegistry(t)
	for v, payload := range map[int]string{1: `{"total":7}`, 2: `{"amount":7}`, 3: `{"amount":7,"currency":"EUR"}`} {
		env := &outbox.Envelope{ID: "e", Type: "order.v", Version: v, Payload: []byte(payload)}
		must(t, reg.Check(env))
		var got orderV3
		must(t, env.Unmarshal(&got))
		if env.Version != 3 || got != (orderV3{7, "EUR"}) {
			t.Errorf("v%d upcast to v%d %+v, want v3 {7 EUR}", v, env.Version, got)
		}
	}
	// An upcaster's failure is the check's, and leaves the envelope as it was.
	env := &outbox.Envelope{ID: "e", Type: "order.v", Version: 1, Payload: []byte(`{"total":"x"}`)}
	if err := reg.Check(env); !errors.Is(err, outbox.ErrInvalidEvent) || !strings.Contains(err.Error(), "upcasting order.v from version 1 to 2") {
		t.Errorf("failing upcaster: %v", err)
	}
	if env.Version != 1 {
		t.Errorf("failed upcast changed the version to %d", env.Version)
	}
	// A stored payload that no longer matches its type fails the check.
	if err := reg.Check(&outbox.Envelope{Type: "order.v", Version: 3, Payload: []byte(`{"amount":1}`)}); !errors.Is(err, outbox.ErrInvalidEvent) || !strings.Contains(err.Error(), `"currency"`) {
		t.Errorf("v3 without its required currency: %v", err)
	}
	if err := reg.Check(&outbox.Envelope{Type: "nobody", Version: 1}); !errors.Is(err, outbox.ErrInvalidEvent) {
		t.Errorf("strict registry checked an unregistered envelope: %v", err)
	}
	if rt, ok := reg.TypeOf("order.v", 2); !ok || rt.Name() != "orderV2" {
		t.Errorf("TypeOf(order.v, 2) = %v, %v", rt, ok)
	}
}

// Registration errors are ErrInvalidConfig, saying what is wrong.
func TestRegistrationErrors(t *testing.T) {
	type badTenant struct {
		Tenant int `outbox:"tenant"`
	}
	type badTag struct {
		A string `outbox:"requird"`
	}
	reg := outbox.NewRegistry()
	must(t, outbox.Register[orderV1](reg, "a", 1))
	noop := func(p json.RawMessage) (json.RawMessage, error) { return p, nil }
	must(t, outbox.RegisterUpcaster(reg, "a", 1, noop))
	for name, c := range map[string]struct {
		err  error
		want string
	}{
		"duplicate":          {outbox.Register[orderV2](reg, "a", 1), "registered already, as outbox_test.orderV1"},
		"version 0":          {outbox.Register[orderV1](reg, "a", 0), "version 0"},
		"empty type":         {outbox.Register[orderV1](reg, " ", 1), "empty event type"},
		"validate of T":      {outbox.Register[orderV1](reg, "b", 1, outbox.Validate(func(orderV2) error { return nil })), "the registered type is outbox_test.orderV1"},
		"tenant not string":  {outbox.Register[badTenant](reg, "b", 1), "is not a string"},
		"unknown tag":        {outbox.Register[badTag](reg, "b", 1), `"requird"`},
		"tenant field":       {outbox.Register[orderV1](reg, "b", 1, outbox.TenantField("Nope")), "no exported string field Nope"},
		"required path":      {outbox.Register[orderV1](reg, "b", 1, outbox.Required("a..b")), `"a..b"`},
		"upcaster twice":     {outbox.RegisterUpcaster(reg, "a", 1, noop), "registered already"},
		"nil upcaster":       {outbox.RegisterUpcaster(reg, "a", 2, nil), "nil upcaster"},
		"upcaster version 0": {outbox.RegisterUpcaster(reg, "a", 0, noop), "version 0"},
	} {
		if !errors.Is(c.err, outbox.ErrInvalidConfig) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrInvalidConfig saying %q", name, c.err, c.want)
		}
	}
	bad := outbox.NewRegistry(outbox.RequireMetadata("ip"))
	if err := outbox.Register[orderV1](bad, "a", 1); !errors.Is(err, outbox.ErrInvalidConfig) || !strings.Contains(err.Error(), `"ip"`) {
		t.Errorf("Register on a registry with a bad option: %v", err)
	}
	db := testenv.Open(t, testenv.SQLite)
	if err := db.Use(&outbox.Plugin{Registry: bad}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("db.Use with a registry's bad option: %v", err)
	}
}

// BenchmarkRegistryCheck measures the check of one stored payload before
// delivery (strict decode into the registered type, a required field, the
// tenant field), and of one upcast from version 1 to 3 then the check.
//
//	go test -run '^$' -bench BenchmarkRegistryCheck -benchmem .
func BenchmarkRegistryCheck(b *testing.B) {
	reg := outbox.NewRegistry()
	if err := outbox.Register[orderPlaced](reg, "order.placed", 1); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"order_id":"o-1","tenant":"t1","amount":250,"note":"gift"}`)
	b.Run("check", func(b *testing.B) {
		for b.Loop() {
			if err := reg.Check(&outbox.Envelope{Type: "order.placed", Version: 1, TenantID: "t1", Payload: payload}); err != nil {
				b.Fatal(err)
			}
		}
	})
	up := upcastRegistry(b)
	b.Run("upcast-1-to-3", func(b *testing.B) {
		for b.Loop() {
			if err := up.Check(&outbox.Envelope{Type: "order.v", Version: 1, Payload: []byte(`{"total":7}`)}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
