package outboxasynq

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// Idempotent returns an asynq middleware that runs the handler it wraps at
// most once successfully per event: it keeps a record under the key
// "<event id>:<handlerName>" in store, where the event id is the one in
// the task's envelope (also its asynq TaskID when a Publisher enqueued
// it).
//
//	mux := asynq.NewServeMux()
//	mux.Use(outboxasynq.Idempotent(store, "billing"))
//	mux.Handle("order.created", outboxasynq.Handler(charge))
//
// or, for one handler of a mux: outboxasynq.Idempotent(store, "billing")(h).
//
// It guarantees that
//
//   - a task whose event already succeeded for handlerName completes at
//     once, without calling the handler: a task enqueued twice (a
//     redelivery after the TaskID retention), retried or replayed runs the
//     handler's effect once;
//   - the handler's success is recorded after it returns nil; a failure
//     records nothing, so asynq's retry runs it again;
//   - while the handler runs, the key is held: another delivery of the
//     same event gets an ordinary error wrapping idempotency.ErrInProgress
//     and is retried by asynq later (see IsFailure to not count it);
//   - a payload that is not an envelope is archived without retry
//     (ErrInvalidTask, asynq.SkipRetry).
//
// The handler's effect and its record do not commit atomically (a crash
// between them runs the handler again): for effects that are writes to
// store's database use IdempotentTx, or idempotency.Store.DoTx in the
// handler. Keep the handler's run shorter than the store's lease
// (idempotency.WithLease), or another delivery may take the key over.
//
// Idempotent panics, with an error wrapping ErrInvalidOption, if store is
// nil or handlerName is empty or longer than
// idempotency.MaxHandlerNameLen.
func Idempotent(store *idempotency.Store, handlerName string) asynq.MiddlewareFunc {
	mustIdempotent("Idempotent", store, handlerName)
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			e, err := envelopeOf(ctx, t)
			if err != nil {
				return err
			}
			ctx = withEnvelope(ctx, t, e)
			return store.Do(ctx, idempotency.HandlerKey(e.ID, handlerName), func(ctx context.Context) error {
				return next.ProcessTask(ctx, t)
			})
		})
	}
}

// IdempotentTx is Idempotent for handlers whose effects are writes to
// store's database: it runs the handler inside a transaction of that
// database in which its record under "<event id>:<handlerName>" commits
// too, so that the handler's writes happen exactly once. The handler
// writes through Tx(ctx):
//
//	mux.Use(outboxasynq.IdempotentTx(store, "stats"))
//	mux.Handle("order.created", outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
//		return outboxasynq.Tx(ctx).Exec("UPDATE stats SET orders = orders + 1").Error
//	}))
//
// A handler error rolls its writes back and asynq retries the task; a
// task whose event already succeeded completes without calling the
// handler. A concurrent delivery of the same event waits for the first to
// commit (then skips) or roll back (then runs); a key held by a running
// Idempotent of the same name gives idempotency.ErrInProgress. The
// transaction stays open while the handler runs: keep it short, and make
// other effects (an e-mail, an HTTP call) idempotent themselves.
//
// IdempotentTx panics as Idempotent does.
func IdempotentTx(store *idempotency.Store, handlerName string) asynq.MiddlewareFunc {
	mustIdempotent("IdempotentTx", store, handlerName)
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			e, err := envelopeOf(ctx, t)
			if err != nil {
				return err
			}
			ctx = withEnvelope(ctx, t, e)
			return store.DoTx(ctx, idempotency.HandlerKey(e.ID, handlerName), func(tx *gorm.DB) error {
				return next.ProcessTask(context.WithValue(ctx, txKey{}, tx), t)
			})
		})
	}
}

type txKey struct{}

// Tx returns the transaction IdempotentTx opened for the handler running
// under ctx, already bound to ctx, or nil outside IdempotentTx.
func Tx(ctx context.Context) *gorm.DB {
	tx, _ := ctx.Value(txKey{}).(*gorm.DB)
	if tx == nil {
		return nil
	}
	return tx.WithContext(ctx)
}

// mustIdempotent panics, with an error wrapping ErrInvalidOption, on a
// nil store or a bad handler name (adapterkit.CheckHandlerName): a
// middleware has no error to return.
func mustIdempotent(fn string, store *idempotency.Store, name string) {
	if store == nil {
		panic(fmt.Errorf("%w: %s: nil store", ErrInvalidOption, fn))
	}
	if err := adapterkit.CheckHandlerName(name); err != nil {
		panic(fmt.Errorf("%w: %s: %w", ErrInvalidOption, fn, err))
	}
}

// IsFailure is meant for asynq.Config.IsFailure: it reports whether a
// handler's error should count against the task's MaxRetry. Errors marked
// outbox.Unavailable (the handler's own dependency is down),
// idempotency.ErrInProgress (another delivery of the event is running)
// and ErrPredecessorPending (KeyOrder: the task before it of its key is
// not done) are retried by asynq without counting; every other non-nil
// error counts.
//
//	srv := asynq.NewServer(redisOpt, asynq.Config{IsFailure: outboxasynq.IsFailure})
//
// asynq asks IsFailure only while the task has retries left: on its last
// attempt (Delivery.LastAttempt; every attempt with WithMaxRetry(0)) any
// error archives it. So an outage can archive a task only on an attempt
// that follows MaxRetry real failures, or when MaxRetry is 0.
func IsFailure(err error) bool {
	return err != nil && !outbox.IsUnavailable(err) && !errors.Is(err, idempotency.ErrInProgress) &&
		!errors.Is(err, ErrPredecessorPending)
}
