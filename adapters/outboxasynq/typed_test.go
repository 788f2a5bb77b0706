package outboxasynq_test

import (
	"context"
	"testing"

	"github.com/gormoutbox/outbox/adapters/outboxasynq"
)

func TestHandlerOfNilPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("HandlerOf(nil) did not panic")
		}
	}()
	outboxasynq.HandlerOf[int](nil)
}

func TestEnvelopeFromOutsideAHandler(t *testing.T) {
	if e, ok := outboxasynq.EnvelopeFrom(context.Background()); ok || e != nil {
		t.Errorf("EnvelopeFrom = %v, %v", e, ok)
	}
}
