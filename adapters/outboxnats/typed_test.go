package outboxnats_test

import (
	"context"
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// TestTxHandlerOf decodes the payload inside IdempotentTx's transaction: a
// good payload reaches the function with its envelope, and commits; a bad
// one is a permanent ErrBadPayload that runs nothing and records nothing.
func TestTxHandlerOf(t *testing.T) {
	db, store := setupDB(t, testenv.Open(t, testenv.SQLite))
	type order struct{ ID, Total int }
	must(t, db.AutoMigrate(&effect{}))
	var got []order
	h := outboxnats.IdempotentTx(store, "typed", outboxnats.TxHandlerOf(func(ctx context.Context, tx *gorm.DB, o order) error {
		e, ok := outboxnats.EnvelopeFrom(ctx)
		if !ok {
			t.Error("no envelope in the context")
		}
		got = append(got, o)
		return tx.Create(&effect{EventID: e.ID}).Error
	}))
	ctx := context.Background()
	good := &outbox.Envelope{ID: "good", Type: "order.created", Payload: []byte(`{"ID":7,"Total":1999}`)}
	bad := &outbox.Envelope{ID: "bad", Type: "order.created", Payload: []byte(`[1,2]`)}
	must(t, h.Handle(ctx, good))
	must(t, h.Handle(ctx, good)) // a duplicate: skipped
	err := h.Handle(ctx, bad)
	if !errors.Is(err, outboxnats.ErrBadPayload) || !outbox.IsPermanent(err) {
		t.Errorf("bad payload: %v, want a permanent ErrBadPayload", err)
	}
	var n int64
	must(t, db.Model(&effect{}).Count(&n).Error)
	if len(got) != 1 || got[0] != (order{7, 1999}) || n != 1 {
		t.Errorf("function got %v, %d effects; want one order {7 1999} and one effect", got, n)
	}
	if outboxnats.HandlerOf[order](nil) != nil || outboxnats.TxHandlerOf[order](nil) != nil {
		t.Error("a nil function should give a nil handler")
	}
}
