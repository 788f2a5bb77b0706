package inproc_test

import (
	"context"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// outbox.Migrate is the one setup step: without a separate migration of
// the idempotency records, the handlers run and the events are published
// (they all went dead with "no such table: outbox_idempotency").
func TestOutboxMigrateIsEnoughForInproc(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{}))
		must(t, outbox.Migrate(db))
		store, err := idempotency.NewStore(db)
		must(t, err)
		mux := inproc.NewMux(store)
		calls := 0
		must(t, mux.HandleFunc("order.created", "count", func(context.Context, *outbox.Envelope) error { calls++; return nil }))
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{Type: "order.created", Payload: []byte(`{}`)})
		}))
		r, err := relay.New(db, mux, relay.WithLogger(testenv.Logger(t)))
		must(t, err)
		res, err := r.RunOnce(t.Context())
		must(t, err)
		if res.Published != 1 || calls != 1 {
			t.Errorf("RunOnce: %+v, handler calls %d; want 1 published, 1 call", res, calls)
		}
	})
}
