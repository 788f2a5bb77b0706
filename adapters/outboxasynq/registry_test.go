package outboxasynq_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
)

type (
	itemV1 struct {
		N int `json:"n"`
	}
	itemV2 struct {
		Count int `json:"count" outbox:"required"`
	}
)

func itemRegistry(t *testing.T) *outbox.Registry {
	reg := outbox.NewRegistry()
	for _, err := range []error{
		outbox.Register[itemV1](reg, "item", 1),
		outbox.Register[itemV2](reg, "item", 2),
		outbox.RegisterUpcaster(reg, "item", 1, func(p json.RawMessage) (json.RawMessage, error) {
			var v itemV1
			if err := json.Unmarshal(p, &v); err != nil {
				return nil, err
			}
			return json.Marshal(itemV2{Count: v.N})
		}),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return reg
}

func itemTask(t *testing.T, version int, payload string) *asynq.Task {
	b, err := json.Marshal(&outbox.Envelope{ID: "e", Type: "item", Version: version, Payload: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return asynq.NewTask("item", b)
}

// Handlers given the registry receive old versions upcast; a payload that
// fails its check, or an event whose registered type is not a typed
// handler's, is archived without a retry and the handler does not run.
func TestHandlerWithRegistry(t *testing.T) {
	reg := itemRegistry(t)
	ctx := context.Background()
	var versions []int
	h := outboxasynq.Handler(func(_ context.Context, e *outbox.Envelope) error {
		versions = append(versions, e.Version)
		return nil
	}, outboxasynq.WithRegistry(reg))
	var counts []int
	typed := outboxasynq.HandlerOf(func(_ context.Context, v itemV2) error {
		counts = append(counts, v.Count)
		return nil
	}, outboxasynq.WithRegistry(reg))
	for _, task := range []*asynq.Task{itemTask(t, 1, `{"n":3}`), itemTask(t, 2, `{"count":3}`)} {
		if err := h.ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
		if err := typed.ProcessTask(ctx, task); err != nil {
			t.Fatal(err)
		}
	}
	if len(versions) != 2 || versions[0] != 2 || versions[1] != 2 || len(counts) != 2 || counts[0] != 3 || counts[1] != 3 {
		t.Errorf("versions %v, counts %v; want version 2 and count 3 twice", versions, counts)
	}
	err := h.ProcessTask(ctx, itemTask(t, 2, `{}`))
	if !errors.Is(err, asynq.SkipRetry) || !errors.Is(err, outboxasynq.ErrBadPayload) || !strings.Contains(err.Error(), `"count"`) || len(versions) != 2 {
		t.Errorf("v2 without its required count: %v (handler ran %d times)", err, len(versions))
	}
	old := outboxasynq.HandlerOf(func(context.Context, itemV1) error { return nil }, outboxasynq.WithRegistry(reg))
	err = old.ProcessTask(ctx, itemTask(t, 1, `{"n":3}`))
	if !errors.Is(err, asynq.SkipRetry) || !strings.Contains(err.Error(), "the handler takes outboxasynq_test.itemV1") {
		t.Errorf("v1 handler given an event upcast to v2: %v", err)
	}
}
