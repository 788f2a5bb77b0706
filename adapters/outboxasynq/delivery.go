package outboxasynq

import (
	"context"

	"github.com/hibiken/asynq"
)

// Delivery describes the asynq task a handler is running: what asynq
// knows of it, as opposed to the envelope's Attempt, which counts the
// relay's attempts to enqueue the event (1 for nearly every event) and
// says nothing of asynq's retries.
type Delivery struct {
	// TaskID is the task's id: the event id, for tasks a Publisher
	// enqueued.
	TaskID string
	// Queue is the queue the task was taken from.
	Queue string
	// Retried counts the earlier runs of the task that asynq counted as
	// failures (asynq.GetRetryCount): 0 on the first run. Runs that ended
	// in an error IsFailure does not count (outbox.Unavailable,
	// idempotency.ErrInProgress, ErrPredecessorPending) are not included,
	// when the server uses IsFailure.
	Retried int
	// MaxRetry is the task's MaxRetry (asynq.GetMaxRetry, see
	// WithMaxRetry).
	MaxRetry int
}

// LastAttempt reports whether asynq archives the task if this run returns
// an error, whatever the error (asynq checks the retry count before it
// asks IsFailure): Retried has reached MaxRetry.
func (d Delivery) LastAttempt() bool { return d.Retried >= d.MaxRetry }

// DeliveryFrom returns the Delivery of the task whose handler received
// ctx; ok is false outside an asynq handler.
func DeliveryFrom(ctx context.Context) (d Delivery, ok bool) {
	var ok1, ok2, ok3, ok4 bool
	d.TaskID, ok1 = asynq.GetTaskID(ctx)
	d.Queue, ok2 = asynq.GetQueueName(ctx)
	d.Retried, ok3 = asynq.GetRetryCount(ctx)
	d.MaxRetry, ok4 = asynq.GetMaxRetry(ctx)
	return d, ok1 && ok2 && ok3 && ok4
}
