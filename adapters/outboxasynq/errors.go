package outboxasynq

import "errors"

// Sentinel errors. Every error of these kinds that the package returns
// wraps one of them, so callers test with errors.Is. Handler's
// configuration errors wrap consume.ErrInvalidOption.
var (
	// ErrInvalidOption is wrapped by the configuration errors that
	// Publisher.Validate reports (and relay.New refuses): a nil client, a
	// nil mapping function, a negative duration or retry count.
	ErrInvalidOption = errors.New("outboxasynq: invalid option")

	// ErrInvalidTask is wrapped when an event cannot become a task (no id,
	// or a task type mapping that returns a blank name), in which case
	// Publish returns it marked outbox.Permanent; and by Decode's error for
	// a task whose payload is not an outbox envelope, which also wraps
	// asynq.SkipRetry and outbox.ErrInvalidEnvelope (Handler archives such
	// a task, its reason wrapping consume.ErrMalformed too).
	ErrInvalidTask = errors.New("outboxasynq: invalid task")

	// ErrPredecessorPending is wrapped by the error of a task that KeyOrder
	// did not run because the task before it of the same partition key is
	// not done yet. IsFailure does not count it; RetryDelay retries it soon.
	ErrPredecessorPending = errors.New("outboxasynq: the previous task of the partition key is not done")
)
