package relay_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// WithAttemptLog records how each claim of an event ended, in the table
// <table>_attempts, written with the relay's own completions; an
// Inspector (like "outbox show" and the admin page) reads it back.
func ExampleWithAttemptLog() {
	db := exampleDB("relay-attempt-log")
	_ = db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{ID: "order-7-created", Type: "order.created"})
	})
	pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
		if e.Attempt == 1 {
			return errors.New("broker timeout")
		}
		return nil
	})
	r, err := relay.New(db, pub, relay.WithAttemptLog(), relay.WithWorkerID("relay-1"),
		relay.WithBackoff(func(int) time.Duration { return 0 }), relay.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		if _, err := r.RunOnce(context.Background()); err != nil {
			log.Fatal(err)
		}
	}

	insp, err := relay.NewInspector(db)
	if err != nil {
		log.Fatal(err)
	}
	attempts, err := insp.Attempts(context.Background(), "order-7-created")
	if err != nil {
		log.Fatal(err)
	}
	for _, a := range attempts {
		fmt.Printf("attempt %d by %s: %s %s\n", a.Attempt, a.RelayID, a.Outcome, a.Error)
	}
	// Output:
	// attempt 1 by relay-1: retried broker timeout
	// attempt 2 by relay-1: published
}
