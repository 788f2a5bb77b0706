package inproc_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

type (
	orderV1 struct {
		Total int `json:"total"`
	}
	orderV3 struct {
		Amount   int    `json:"amount"`
		Currency string `json:"currency" outbox:"required"`
	}
)

// registry has order.v versions 1 and 3, and upcasters 1→2→3 (version 2
// is not registered: nothing writes it any more).
func registry(t testing.TB) *outbox.Registry {
	reg := outbox.NewRegistry()
	must(t, outbox.Register[orderV1](reg, "order.v", 1))
	must(t, outbox.Register[orderV3](reg, "order.v", 3))
	must(t, outbox.RegisterUpcaster(reg, "order.v", 1, func(p json.RawMessage) (json.RawMessage, error) {
		var v orderV1
		if err := json.Unmarshal(p, &v); err != nil {
			return nil, err
		}
		return json.Marshal(map[string]int{"amount": v.Total})
	}))
	must(t, outbox.RegisterUpcaster(reg, "order.v", 2, func(p json.RawMessage) (json.RawMessage, error) {
		var v map[string]any
		if err := json.Unmarshal(p, &v); err != nil {
			return nil, err
		}
		v["currency"] = "EUR"
		return json.Marshal(v)
	}))
	return reg
}

// A Mux given the registry checks each event before its handlers: a typed
// handler written for version 3 receives version 1 events upcast (its
// context's envelope says version 3), and an event that fails the check
// runs no handler and is dead at once with the reason. The relay has no
// registry here: the events were written and relayed without one.
func TestMuxWithRegistryUpcastsAndChecks(t *testing.T) {
	reg := registry(t)
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
		store, err := idempotency.NewStore(db)
		must(t, err)
		mux := inproc.NewMux(store, inproc.WithRegistry(reg))
		var mu sync.Mutex
		got := map[string]orderV3{}
		must(t, mux.Handle("order.v", "h", consume.HandlerOf(func(ctx context.Context, o orderV3) error {
			e, _ := consume.EnvelopeFrom(ctx)
			if e.Version != 3 {
				return errors.New("envelope not upcast")
			}
			mu.Lock()
			defer mu.Unlock()
			got[e.ID] = o
			return nil
		}, consume.Registered(reg))))
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx,
				outbox.Event{ID: "v1", Type: "order.v", Version: 1, Payload: orderV1{7}},
				outbox.Event{ID: "v3", Type: "order.v", Version: 3, Payload: orderV3{7, "EUR"}},
				outbox.Event{ID: "bad", Type: "order.v", Version: 3, Payload: map[string]int{"amount": 7}})
		}))
		r, err := relay.New(db, mux, relay.WithLogger(slog.New(slog.DiscardHandler)))
		must(t, err)
		res, err := r.RunOnce(t.Context())
		must(t, err)
		if res.Published != 2 || res.Dead != 1 {
			t.Errorf("relay %+v, want 2 published and 1 dead at once", res)
		}
		if len(got) != 2 || got["v1"] != (orderV3{7, "EUR"}) || got["v3"] != (orderV3{7, "EUR"}) {
			t.Errorf("handler got %+v", got)
		}
		dead, err := mustInspector(t, db).ListDead(t.Context(), relay.Filter{})
		must(t, err)
		if len(dead) != 1 || dead[0].LastError == nil || !strings.Contains(*dead[0].LastError, `"currency"`) ||
			!strings.Contains(*dead[0].LastError, "payload does not decode") {
			t.Errorf("dead events %+v, want bad with the missing currency as reason", dead)
		}
	})
}

// A typed handler given the registry refuses, permanently, an event whose
// registered payload type is not the handler's.
func TestTypedHandlerRegisteredType(t *testing.T) {
	reg := registry(t)
	called := false
	h := consume.HandlerOf(func(context.Context, orderV1) error { called = true; return nil }, consume.Registered(reg))
	err := h.Handle(t.Context(), &outbox.Envelope{ID: "e", Type: "order.v", Version: 1, Payload: []byte(`{"total":7}`)})
	if !errors.Is(err, consume.ErrBadPayload) || !outbox.IsPermanent(err) || called ||
		!strings.Contains(err.Error(), "registered with payload inproc_test.orderV3, the handler takes inproc_test.orderV1") {
		t.Errorf("v1 handler given a v1 event upcast to v3: %v (called %v)", err, called)
	}
	// Without the option, the handler decodes what it is given.
	h = consume.HandlerOf(func(context.Context, orderV1) error { called = true; return nil })
	if err := h.Handle(t.Context(), &outbox.Envelope{ID: "e", Type: "order.v", Version: 1, Payload: []byte(`{"total":7}`)}); err != nil || !called {
		t.Errorf("handler without registry: %v", err)
	}
}
