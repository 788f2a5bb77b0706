package outbox_test

import (
	"context"
	"log"
	"os"
	"os/signal"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// WAL mode: events are written as logical decoding messages in the
// caller's transaction, and the same relay streams them from the
// replication slot. (It needs PostgreSQL 14 or later with
// wal_level=logical, so it is compiled, not run.)
func ExampleWAL() {
	db, err := gorm.Open(postgres.Open("postgres://app@localhost:5432/app"), &gorm.Config{})
	if err != nil {
		log.Fatal(err)
	}
	p := &outbox.Plugin{WAL: &outbox.WAL{}} // the slot "outbox_events_wal"
	// The tables, the publication and the slot, before Use, which refuses a
	// server without them (ErrWALNotReady, naming the fix); AutoMigrate: true
	// makes Use do it, and so does `outbox migrate --wal`.
	if err := p.Migrate(db); err != nil {
		log.Fatal(err)
	}
	if err := db.Use(p); err != nil {
		log.Fatal(err)
	}
	// Emit, Recorder and Track are used as in table mode.

	// In the worker: the same relay, which streams the slot and still runs
	// the table's services (retries, dead events, retention).
	pub := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
		log.Printf("%s %s", e.Type, e.ID) // your broker's publisher instead
		return nil
	})
	r, err := relay.New(db, pub)
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := r.Start(ctx); err != nil { // relay.ErrWALSlotLost if the slot was invalidated
		log.Fatal(err)
	}
}
