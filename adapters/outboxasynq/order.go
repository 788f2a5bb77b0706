package outboxasynq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

// TurnRetryDelay is the delay RetryDelay gives a task whose predecessor
// was not done (ErrPredecessorPending). asynq moves a task due for a retry
// back to its queue every asynq.Config.DelayedTaskCheckInterval (5s by
// default), which bounds how soon it runs again.
const TurnRetryDelay = 200 * time.Millisecond

// KeyOrder returns an asynq middleware that runs the tasks of one
// partition key one at a time, in the order the relay enqueued them,
// across all the workers and servers that run it: a task whose
// predecessor (named by a Publisher WithKeyChain, see HeaderAfterID) is
// still pending, scheduled, active or waiting for a retry does not run its
// handler. It waits for its predecessor up to wait in its worker, checking
// every few milliseconds, then returns an error wrapping
// ErrPredecessorPending, which IsFailure does not count and RetryDelay
// retries soon. A task on asynq's last attempt (retried MaxRetry times),
// which asynq would archive after any error, waits in its worker until its
// predecessor is done or its own deadline passes. A predecessor that
// completed, was archived (dead) or deleted, or that asynq no longer holds
// (after its retention), is done: a dead event does not hold up its key.
// Tasks without a predecessor run at once.
//
// rdb is asynq's Redis, where the predecessor's state is read (one
// round trip per keyed task, and per check while it waits). Use KeyOrder
// before the other middlewares of the mux, and configure the server with
// IsFailure and RetryDelay, or every wait counts as a failure:
//
//	mux.Use(outboxasynq.KeyOrder(rdb, time.Second))
//	mux.Handle("order.created", outboxasynq.Handler(h))
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:                outboxasynq.IsFailure,
//		RetryDelayFunc:           outboxasynq.RetryDelay(nil),
//		DelayedTaskCheckInterval: 200 * time.Millisecond, // retried waits run again sooner
//	})
//
// The predecessor must be in a queue some server processes, or its key
// waits. KeyOrder panics if rdb is nil or wait is negative.
func KeyOrder(rdb redis.UniversalClient, wait time.Duration) asynq.MiddlewareFunc {
	switch {
	case rdb == nil:
		panic("outboxasynq: KeyOrder: nil redis client")
	case wait < 0:
		panic("outboxasynq: KeyOrder: negative wait")
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	return func(next asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			prev := taskRef{Queue: t.Headers()[HeaderAfterQueue], ID: t.Headers()[HeaderAfterID]}
			if prev.ID != "" {
				if err := awaitTurn(ctx, insp, prev, wait); err != nil {
					return err
				}
			}
			return next.ProcessTask(ctx, t)
		})
	}
}

// awaitTurn returns nil once prev is done, or an error after wait (or at
// the end of ctx on a task's last attempt).
func awaitTurn(ctx context.Context, insp *asynq.Inspector, prev taskRef, wait time.Duration) error {
	retried, ok1 := asynq.GetRetryCount(ctx)
	maxRetry, ok2 := asynq.GetMaxRetry(ctx)
	last := ok1 && ok2 && retried >= maxRetry
	deadline := time.Now().Add(wait)
	step := 5 * time.Millisecond
	for {
		state, done, err := predecessorState(insp, prev)
		switch {
		case err != nil:
			return outbox.Unavailable(fmt.Errorf("outboxasynq: reading the predecessor of the task, task %s of queue %q: %w", prev.ID, prev.Queue, err))
		case done:
			return nil
		}
		if !last && !time.Now().Before(deadline) {
			return fmt.Errorf("%w: task %s of queue %q is %s", ErrPredecessorPending, prev.ID, prev.Queue, state)
		}
		pause := step
		if !last {
			pause = min(step, time.Until(deadline))
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w: task %s of queue %q is %s: %w", ErrPredecessorPending, prev.ID, prev.Queue, state, ctx.Err())
		case <-t.C:
		}
		step = min(2*step, 100*time.Millisecond)
	}
}

// predecessorState reads the state of task prev and whether it is done:
// completed, archived, or no longer held by asynq.
func predecessorState(insp *asynq.Inspector, prev taskRef) (asynq.TaskState, bool, error) {
	info, err := insp.GetTaskInfo(prev.Queue, prev.ID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
		return 0, true, nil
	case err != nil:
		return 0, false, err
	}
	return info.State, info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived, nil
}

// RetryDelay returns an asynq.RetryDelayFunc for asynq.Config: a task
// that Handler hands back is retried after the delay its consumer chose
// (consume.WithRetryDelay doubling up to WithMaxRetryDelay after a
// failure, the snooze of outbox.Snooze, …), a task that waited for its
// predecessor (ErrPredecessorPending) after TurnRetryDelay, and every
// other failure after what next says (asynq.DefaultRetryDelayFunc when
// next is nil).
func RetryDelay(next asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if next == nil {
		next = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		var re *retryError
		switch {
		case errors.As(err, &re):
			return re.delay
		case errors.Is(err, ErrPredecessorPending):
			return TurnRetryDelay
		}
		return next(n, err, t)
	}
}

// IsFailure is meant for asynq.Config.IsFailure: it reports whether a
// handler's error should count against the task's MaxRetry. A task that
// Handler hands back counts as its consumer says: a failed run counts;
// outbox.Unavailable, outbox.Snooze, idempotency.ErrInProgress and tasks
// not run do not. Of other handlers' errors, those marked
// outbox.Unavailable, idempotency.ErrInProgress and ErrPredecessorPending
// (KeyOrder) do not count; every other non-nil error does.
//
//	srv := asynq.NewServer(redisOpt, asynq.Config{IsFailure: outboxasynq.IsFailure})
//
// asynq asks IsFailure only while the task has retries left: on its last
// attempt (every attempt with WithMaxRetry(0)) any error archives it.
// Handler keeps that attempt unused (see Handler).
func IsFailure(err error) bool {
	var re *retryError
	if errors.As(err, &re) {
		return re.counted
	}
	return err != nil && !outbox.IsUnavailable(err) && !errors.Is(err, idempotency.ErrInProgress) &&
		!errors.Is(err, ErrPredecessorPending)
}
