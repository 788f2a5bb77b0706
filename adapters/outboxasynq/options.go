package outboxasynq

import (
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// DefaultRetention is how long asynq keeps a task after it succeeded,
// unless WithRetention says otherwise.
//
// The Publisher makes the event id the asynq TaskID, so that a relay that
// delivers an event again (after a crash or a lost lease, once the lease
// expired) does not enqueue a second task: asynq refuses the id, and the
// Publisher counts that as delivered. asynq enforces the id only while the
// task exists in Redis, though: without retention a task that succeeded
// frees its id at once, and a late redelivery would enqueue it again. A
// day covers any realistic redelivery (a relay's lease and retry backoff
// are seconds to minutes) at the cost of keeping each completed task, its
// payload included, in Redis for that long: size Redis for a day of
// events, or lower the retention.
const DefaultRetention = 24 * time.Hour

// Option configures a Publisher. Options are checked by
// Publisher.Validate, which relay.New calls. The consumer side's options
// are consume.Options (see Handler).
type Option func(*publisherConfig)

type publisherConfig struct {
	adapterkit.PublisherConfig
	taskType  func(*outbox.Envelope) string
	queue     func(*outbox.Envelope) string
	maxRetry  int // -1: asynq's default
	timeout   time.Duration
	retention time.Duration
	extra     func(*outbox.Envelope) []asynq.Option
	// chainRedis is the Redis of WithKeyChain.
	chainRedis redis.UniversalClient
}

func defaultPublisherConfig() publisherConfig {
	return publisherConfig{
		PublisherConfig: adapterkit.NewPublisherConfig(ErrInvalidOption),
		maxRetry:        -1,
		retention:       DefaultRetention,
	}
}

// WithSource sets the CloudEvents source of the envelopes the Publisher
// writes, when the envelope has none (default outbox.DefaultSource). It
// must not be empty.
func WithSource(source string) Option {
	return func(c *publisherConfig) {
		c.SetSource(source)
	}
}

// WithTaskType maps an event to its asynq task type, which is what an
// asynq.ServeMux routes on (default: the event's Type). The function must
// be safe for concurrent use; a blank result makes Publish fail with
// ErrInvalidTask, marked outbox.Permanent.
func WithTaskType(f func(e *outbox.Envelope) string) Option {
	return func(c *publisherConfig) {
		if f == nil {
			c.Fail("task type function is nil")
		}
		c.taskType = f
	}
}

// WithQueue maps an event to its asynq queue (default: the event's Topic,
// or asynq's "default" queue when the Topic is empty; a blank result means
// "default" too). It must be deterministic: asynq enforces TaskIDs per
// queue, so an event redelivered into another queue would be enqueued
// twice. It must be safe for concurrent use.
func WithQueue(f func(e *outbox.Envelope) string) Option {
	return func(c *publisherConfig) {
		if f == nil {
			c.Fail("queue function is nil")
		}
		c.queue = f
	}
}

// WithMaxRetry sets how many times asynq retries a failed task before it
// archives it (default asynq's, 25). Zero means no retry.
func WithMaxRetry(n int) Option {
	return func(c *publisherConfig) {
		if n < 0 {
			c.Fail("max retry %d is negative", n)
		}
		c.maxRetry = n
	}
}

// WithTimeout sets how long a handler may process the task before asynq
// cancels its context and retries it (default asynq's, 30 minutes). Zero
// means asynq's default.
func WithTimeout(d time.Duration) Option {
	return func(c *publisherConfig) {
		if d < 0 {
			c.Fail("timeout %v is negative", d)
		}
		c.timeout = d
	}
}

// WithRetention sets how long asynq keeps a task after it succeeded
// (default DefaultRetention, 24h), which is how long its TaskID keeps a
// redelivered event from being enqueued again. Zero keeps nothing: a
// redelivery after the task succeeded enqueues it again, so consumers must
// deduplicate (see consume.Idempotent), which they should do in any case.
func WithRetention(d time.Duration) Option {
	return func(c *publisherConfig) {
		if d < 0 {
			c.Fail("retention %v is negative", d)
		}
		c.retention = d
	}
}

// WithTaskOptions adds asynq options to each event's task, such as
// asynq.ProcessIn, asynq.Deadline or asynq.Group. They are applied after
// WithMaxRetry, WithTimeout and WithRetention, so they may override them,
// but before the queue and the TaskID, which the Publisher always sets
// itself. The function must be safe for concurrent use; it may return nil.
func WithTaskOptions(f func(e *outbox.Envelope) []asynq.Option) Option {
	return func(c *publisherConfig) {
		if f == nil {
			c.Fail("task options function is nil")
		}
		c.extra = f
	}
}

// WithLogger sets the Publisher's logger (default slog.Default()); it
// logs at debug level only (the relay reports outcomes). Payloads are
// never logged. A nil logger is reported by Validate. Handler's logger is
// consume.WithLogger.
func WithLogger(l *slog.Logger) Option {
	return func(c *publisherConfig) {
		c.SetLogger(l)
	}
}

// WithKeyChain makes the task of every event with a PartitionKey name the
// task enqueued before it for the same key (HeaderAfterQueue and
// HeaderAfterID), so that a server whose handlers run under KeyOrder runs
// the tasks of a key one at a time, in order. rdb must be the Redis of
// asynq (the Publisher reads the tasks it enqueued there): the Publisher
// keeps each key's last task under ChainKey for KeyChainTTL, recorded
// after its task is enqueued, so that an event that is never enqueued
// (dead in the relay) holds up no one. The relay enqueues the events of a
// key one at a time in their commit order; each costs two more Redis round
// trips. Events without a key are enqueued as usual.
func WithKeyChain(rdb redis.UniversalClient) Option {
	return func(c *publisherConfig) {
		if rdb == nil {
			c.Fail("key chain redis client is nil")
		}
		c.chainRedis = rdb
	}
}
