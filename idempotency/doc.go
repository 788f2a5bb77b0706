// Package idempotency makes consumers of outbox events act once per event.
// A Store keeps a record per key (usually "<event id>:<handler name>") in a
// table of the application's database, created by outbox.Migrate (or, for
// a table of another name, by Migrate) or by the files of package
// migrations. NewStore fails with outbox.ErrNotMigrated without it.
//
//	_ = outbox.Migrate(db) // the outbox tables and outbox_idempotency
//	store, _ := idempotency.NewStore(db)
//
//	// A handler whose effect is a write to the same database: the write
//	// and the record commit together, so the effect happens exactly once.
//	err := store.DoTx(ctx, e.ID+":stats", func(tx *gorm.DB) error {
//		return tx.Exec("UPDATE stats SET orders = orders + 1").Error
//	})
//
//	// Any other handler: runs unless the key succeeded before.
//	err = store.Do(ctx, e.ID+":email", func(ctx context.Context) error { return send(ctx, e) })
//
//	// An external call inside a handler that may be retried: made once,
//	// its result replayed on the retry.
//	receipt, err := store.SideEffect(ctx, e.ID+":charge", func(ctx context.Context) ([]byte, error) {
//		return payments.Charge(ctx, amount)
//	})
//
// Do holds its key while fn runs: a concurrent call of the same key gets
// ErrInProgress and should retry later (asynq and the relay retry failed
// deliveries). A failed fn releases the key. Records expire after their TTL
// (WithTTL, default 7 days); Purge deletes them.
//
// # What is guaranteed
//
//   - DoTx: fn's writes and the key's record commit in one transaction, so
//     the effect happens exactly once per key, whatever crashes or
//     redeliveries occur, as long as fn writes only through its tx.
//   - Do: fn is not run again once it succeeded for the key. A process that
//     dies while fn runs leaves the key held until its lease expires; the
//     next delivery then runs fn again: at least once, at most once per
//     success. Use it for effects that are themselves idempotent or cheap
//     to repeat.
//   - SideEffect: the result of the first successful call is stored and
//     returned to every later call of the key, so a retried handler does
//     not repeat the external call once it succeeded.
//   - Two concurrent calls of one key never both run fn: the second gets
//     ErrInProgress (the relay snoozes such a delivery instead of spending
//     an attempt).
//   - These hold on PostgreSQL, MySQL/MariaDB (with any DSN flag) and SQLite.
package idempotency
