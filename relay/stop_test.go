package relay_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// Stopped at any moment, a relay leaves nothing publishing: deliveries in
// hand finish, claims in flight complete and are released.
func TestStopAtAnyMomentLeavesNothingPublishing(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 3000, event)
		pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil })
		for i := range 25 {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			r := newRelay(t, db, pub, relay.WithBatchSize(20), relay.WithWorkerID("stopper"))
			go func() { done <- r.Start(ctx) }()
			time.Sleep(time.Duration(i%7) * 3 * time.Millisecond)
			cancel()
			must(t, <-done)
			if n := countStatus(t, db, outbox.StatusPublishing); n != 0 {
				t.Fatalf("stop %d: %d events left publishing", i, n)
			}
		}
	})
}
