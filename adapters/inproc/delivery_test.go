package inproc_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/relay"
)

// A handler run by the relay sees the relay's count in consume.Delivery:
// the attempt and the most the relay gives the event, so that LastAttempt
// is true on the run whose failure makes the event dead.
func TestHandlersSeeTheRelaysAttempts(t *testing.T) {
	eachMux(t, func(t *testing.T, db *gorm.DB, mux *inproc.Mux) {
		var seen []consume.Delivery
		must(t, mux.HandleFunc("t", "counts", func(ctx context.Context, e *outbox.Envelope) error {
			d, ok := consume.DeliveryFrom(ctx)
			if !ok {
				t.Error("no Delivery in the handler's context")
			}
			if env, ok := consume.EnvelopeFrom(ctx); !ok || env.ID != e.ID {
				t.Errorf("envelope in the context: %v %v", env, ok)
			}
			seen = append(seen, d)
			return errors.New("fails")
		}))
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{ID: "e", Type: "t", MaxAttempts: 2})
		}))
		r, err := relay.New(db, mux, relay.WithLogger(slog.New(slog.DiscardHandler)),
			relay.WithBackoff(func(int) (d time.Duration) { return 0 }))
		must(t, err)
		for range 2 {
			_, err := r.RunOnce(t.Context())
			must(t, err)
		}
		if len(seen) != 2 || seen[0].Attempt != 1 || seen[1].Attempt != 2 || seen[1].MaxAttempts != 2 ||
			seen[0].LastAttempt() || !seen[1].LastAttempt() || seen[0].System != inproc.System {
			t.Errorf("deliveries %+v", seen)
		}
	})
}
