// Package inproc delivers outbox events to handlers in the same process,
// with idempotency records so that each handler acts once per event.
//
//	store, _ := idempotency.NewStore(db)
//	mux := inproc.NewMux(store)
//	mux.Handle("order.created", "send-receipt", sendReceipt)
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
// fails (ErrHandlerPanic, retried like any failure); the panic is logged
// with the handler's name.
//
// HandlerOf and TxHandlerOf adapt a function of the payload decoded into a
// Go type, with the envelope in its context (EnvelopeFrom):
//
//	mux.Handle("order.created", "send-receipt", inproc.HandlerOf(func(ctx context.Context, o Order) error { … }))
//
// A payload that does not decode into the type fails with ErrBadPayload,
// marked outbox.Permanent: the event is dead in the outbox at once
// (unless another handler of its type failed and can succeed on a retry).
//
// Given an outbox.Registry, NewMux(store, WithRegistry(reg)) upcasts and
// checks each event before its handlers (a failed check: ErrBadPayload,
// Permanent), and HandlerOf(fn, Registered(reg)) requires the handler's
// type to be the one registered for the event's type and version, so that
// a handler written for version 3 receives version 1 and 2 events upcast.
//
// Unlike the asynq and Redis adapters, whose consumers run after the
// relay's work is done, the handlers here run inside the relay's delivery:
// a handler's failure is the event's (retried with the relay's backoff,
// dead in the outbox after its attempts, listed by `outbox dead list`),
// the envelope's Attempt counts the deliveries to the handlers, and the
// events of one PartitionKey reach the handlers one at a time, in commit
// order.
package inproc
