package outboxasynq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hibiken/asynq"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
)

// OrderPlaced is the payload of "order.placed" events in the examples.
type OrderPlaced struct {
	OrderID int    `json:"order_id"`
	Email   string `json:"email"`
}

// A handler of the decoded payload. A payload that does not decode into
// the type is archived without a retry; the envelope is in the context.
// (Shown without Redis: the tasks are built the way a Publisher builds
// them.)
func ExampleHandlerOf() {
	h := outboxasynq.HandlerOf(func(ctx context.Context, o OrderPlaced) error {
		e, _ := outboxasynq.EnvelopeFrom(ctx)
		fmt.Printf("event %s: receipt for order %d to %s\n", e.ID, o.OrderID, o.Email)
		return nil
	}, outboxasynq.WithLogger(slog.New(slog.DiscardHandler)))

	task := func(id, payload string) *asynq.Task {
		b, _ := json.Marshal(&outbox.Envelope{ID: id, Type: "order.placed", Payload: []byte(payload)})
		return asynq.NewTask("order.placed", b)
	}
	fmt.Println(h.ProcessTask(context.Background(), task("evt-1", `{"order_id":42,"email":"ann@example.com"}`)))

	err := h.ProcessTask(context.Background(), task("evt-2", `{"order_id":"forty-two"}`))
	fmt.Println("bad payload:", errors.Is(err, outboxasynq.ErrBadPayload), "skip retry:", errors.Is(err, asynq.SkipRetry))
	fmt.Println(err)
	// Output:
	// event evt-1: receipt for order 42 to ann@example.com
	// <nil>
	// bad payload: true skip retry: true
	// skip retry for the task: permanent: outboxasynq: payload does not decode: event evt-2 (order.placed) into outboxasynq_test.OrderPlaced: json: cannot unmarshal string into Go struct field OrderPlaced.order_id of type int
}

// A handler that knows which asynq attempt it is on: asynq's retry count,
// not the envelope's Attempt, which counts the relay's attempts to enqueue.
func ExampleDeliveryFrom() {
	h := outboxasynq.HandlerOf(func(ctx context.Context, o OrderPlaced) error {
		d, _ := outboxasynq.DeliveryFrom(ctx)
		if d.LastAttempt() {
			// Any error now archives the task: say so somewhere a person
			// looks, or take the fallback path.
			return outbox.Permanent(fmt.Errorf("giving up on order %d after %d retries", o.OrderID, d.Retried))
		}
		return fmt.Errorf("mail server busy (retry %d of %d)", d.Retried, d.MaxRetry)
	})
	mux := asynq.NewServeMux()
	mux.Handle("order.placed", h)
	_ = mux // srv.Run(mux)
}
