package inproc_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/relay"
)

// Typed handlers get the payload as emitted; an event whose payload does
// not decode is dead at once, its reason naming the event, its type and
// the Go type.
func TestTypedHandlersThroughTheRelay(t *testing.T) {
	type Order struct {
		ID    int
		Total int
	}
	eachMux(t, func(t *testing.T, db *gorm.DB, mux *inproc.Mux) {
		var got []Order
		var ids []string
		must(t, mux.Handle("order.created", "plain", consume.HandlerOf(func(ctx context.Context, o Order) error {
			e, ok := consume.EnvelopeFrom(ctx)
			if !ok {
				return errors.New("no envelope in the context")
			}
			ids = append(ids, e.ID)
			got = append(got, o)
			return nil
		})))
		must(t, mux.HandleTx("order.created", "tx", consume.TxHandlerOf(func(_ context.Context, tx *gorm.DB, o Order) error {
			if o.ID == 0 {
				return errors.New("not decoded")
			}
			return tx.Exec("SELECT 1").Error
		})))
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx,
				outbox.Event{ID: "good", Type: "order.created", Payload: Order{ID: 7, Total: 1999}},
				outbox.Event{ID: "bad", Type: "order.created", Payload: []byte(`{"ID":"seven"}`)})
		}))
		r, err := relay.New(db, mux, relay.WithLogger(slog.New(slog.DiscardHandler)))
		must(t, err)
		res, err := r.RunOnce(t.Context())
		must(t, err)
		if res.Published != 1 || res.Dead != 1 {
			t.Errorf("relay %+v, want 1 published and 1 dead at once", res)
		}
		if len(got) != 1 || got[0] != (Order{ID: 7, Total: 1999}) || ids[0] != "good" {
			t.Errorf("handler got %+v for %v", got, ids)
		}
		dead, err := mustInspector(t, db).ListDead(t.Context(), relay.Filter{})
		must(t, err)
		if len(dead) != 1 || dead[0].LastError == nil {
			t.Fatalf("dead events %+v", dead)
		}
		for _, want := range []string{"bad", "order.created", "inproc_test.Order", "payload does not decode"} {
			if !strings.Contains(*dead[0].LastError, want) {
				t.Errorf("dead reason %q does not name %q", *dead[0].LastError, want)
			}
		}
	})
}

func TestTypedHandlerOfNilIsRefused(t *testing.T) {
	eachMux(t, func(t *testing.T, _ *gorm.DB, mux *inproc.Mux) {
		if err := mux.Handle("t", "h", consume.HandlerOf[int](nil)); !errors.Is(err, inproc.ErrInvalidHandler) {
			t.Errorf("Handle(HandlerOf(nil)) = %v", err)
		}
		if err := mux.HandleTx("t", "h", consume.TxHandlerOf[int](nil)); !errors.Is(err, inproc.ErrInvalidHandler) {
			t.Errorf("HandleTx(TxHandlerOf(nil)) = %v", err)
		}
	})
}
