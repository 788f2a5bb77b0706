package inproc_test

import (
	"context"
	"log"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/relay"
)

// The application's, in Example_oneHandler (compiled, not run), as in the
// README's examples for every broker.
var (
	db    *gorm.DB           // gorm.Open(…), with db.Use(&outbox.Plugin{})
	store *idempotency.Store // idempotency.NewStore(db)
	h     consume.Handler    // the README's handler: consume.IdempotentTx(store, "welcome", …)
	ctx   context.Context    // ends when the process stops
)

// check stands for the application's error handling.
func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// try stands for the application's error handling of a call that
// returns a value.
func try[T any](v T, err error) T {
	check(err)
	return v
}

// The README's handler, in the relay's own process: the relay delivers
// each event to the handlers of its type, and a handler's failure is the
// event's (retried by the relay, then dead in the outbox).
func Example_oneHandler() {
	mux := inproc.NewMux(store) // each handler acts once per event
	check(mux.Handle("user.signed_up", "welcome", h))
	r := try(relay.New(db, mux))
	check(r.Start(ctx)) // until ctx ends
}
