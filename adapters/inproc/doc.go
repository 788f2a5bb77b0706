// Package inproc delivers outbox events to handlers in the same process,
// with idempotency records so that each handler acts once per event.
//
//	store, _ := idempotency.NewStore(db)
//	mux := inproc.NewMux(store)
//	mux.Handle("order.created", "send-receipt", sendReceipt) // a consume.Handler
//	mux.HandleTx("order.created", "update-stats", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
//		return tx.Exec("UPDATE stats SET orders = orders + 1").Error // commits with its record: exactly once
//	})
//	r, _ := relay.New(db, mux)
//	r.Start(ctx)
//
// Every handler registered for an event's type runs, in registration
// order. Each handler's success is recorded under "<event id>:<handler
// name>": when the relay delivers an event again (after a failure of
// another handler, a crash or a replay), handlers that already succeeded
// are skipped. A handler registered with HandleTx runs inside a database
// transaction in which its record commits too, so its writes to that
// database happen exactly once. Other handlers run at least once, and
// exactly once when they succeed and their record is written.
//
// A replayed dead event skips its succeeded handlers too, as long as
// their records are kept (idempotency.WithTTL).
//
// When a handler's key is held by another delivery of the event (still
// running, or a relay that crashed in the handler, until the store's lease
// frees the key), Publish returns outbox.Snooze wrapping
// idempotency.ErrInProgress: the relay delivers the event again after
// WithInProgressDelay without spending an attempt. A handler that panics
// fails (consume.ErrHandlerPanic, retried like any failure); the panic is
// logged with the handler's name.
//
// Handlers are those of package consume, the one vocabulary of every
// adapter: a handler written for a broker's consumer runs here unchanged,
// and back. consume.HandlerOf and consume.TxHandlerOf adapt a function of
// the payload decoded into a Go type, with the envelope in its context
// (consume.EnvelopeFrom):
//
//	mux.Handle("order.created", "send-receipt", consume.HandlerOf(func(ctx context.Context, o Order) error { … }))
//
// consume.DeliveryFrom gives a handler the relay's count: Attempt is the
// envelope's, MaxAttempts the most the relay gives the event
// (relay.MaxAttemptsOf), so that LastAttempt says whether a failure now
// makes the event dead. A payload that does not decode into the type fails
// with consume.ErrBadPayload,
// marked outbox.Permanent: the event is dead in the outbox at once
// (unless another handler of its type failed and can succeed on a retry).
//
// Given an outbox.Registry, NewMux(store, WithRegistry(reg)) upcasts and
// checks each event before its handlers (a failed check:
// consume.ErrBadPayload, Permanent), and consume.HandlerOf(fn,
// consume.Registered(reg)) requires the handler's type to be the one
// registered for the event's type and version, so that a handler written
// for version 3 receives version 1 and 2 events upcast.
//
// Unlike the consumers of the broker adapters, which run after the
// relay's work is done, the handlers here run inside the relay's delivery:
// a handler's failure is the event's (retried with the relay's backoff,
// dead in the outbox after its attempts, listed by `outbox dead list`),
// the envelope's Attempt counts the deliveries to the handlers, and the
// events of one PartitionKey reach the handlers one at a time, in commit
// order.
package inproc
