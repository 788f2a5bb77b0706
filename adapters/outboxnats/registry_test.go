package outboxnats_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
)

type (
	itemV1 struct {
		N int `json:"n"`
	}
	itemV2 struct {
		Count int `json:"count" outbox:"required"`
	}
)

// A typed handler given the registry receives old versions upcast, and
// refuses, permanently, a payload that fails its check or an event whose
// registered type is not the handler's.
func TestTypedHandlerRegistered(t *testing.T) {
	reg := outbox.NewRegistry()
	must(t, outbox.Register[itemV1](reg, "item", 1))
	must(t, outbox.Register[itemV2](reg, "item", 2))
	must(t, outbox.RegisterUpcaster(reg, "item", 1, func(p json.RawMessage) (json.RawMessage, error) {
		var v itemV1
		if err := json.Unmarshal(p, &v); err != nil {
			return nil, err
		}
		return json.Marshal(itemV2{Count: v.N})
	}))
	var got []itemV2
	var versions []int
	h := outboxnats.HandlerOf(func(ctx context.Context, v itemV2) error {
		e, _ := outboxnats.EnvelopeFrom(ctx)
		got, versions = append(got, v), append(versions, e.Version)
		return nil
	}, outboxnats.Registered(reg))
	must(t, h.Handle(t.Context(), &outbox.Envelope{ID: "a", Type: "item", Version: 1, Payload: []byte(`{"n":3}`)}))
	must(t, h.Handle(t.Context(), &outbox.Envelope{ID: "b", Type: "item", Version: 2, Payload: []byte(`{"count":4}`)}))
	if len(got) != 2 || got[0].Count != 3 || got[1].Count != 4 || versions[0] != 2 || versions[1] != 2 {
		t.Errorf("handler got %+v at versions %v, want counts 3 and 4 at version 2", got, versions)
	}
	err := h.Handle(t.Context(), &outbox.Envelope{ID: "c", Type: "item", Version: 2, Payload: []byte(`{}`)})
	if !errors.Is(err, outboxnats.ErrBadPayload) || !outbox.IsPermanent(err) || !strings.Contains(err.Error(), `"count"`) {
		t.Errorf("v2 without its required count: %v", err)
	}
	old := outboxnats.HandlerOf(func(context.Context, itemV1) error { return nil }, outboxnats.Registered(reg))
	err = old.Handle(t.Context(), &outbox.Envelope{ID: "d", Type: "item", Version: 1, Payload: []byte(`{"n":3}`)})
	if !errors.Is(err, outboxnats.ErrBadPayload) || !strings.Contains(err.Error(), "the handler takes outboxnats_test.itemV1") {
		t.Errorf("v1 handler given an event upcast to v2: %v", err)
	}
}
