package outboxasynq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit/redisdown"
	"github.com/gormoutbox/outbox/internal/optionerr"
)

// DefaultQueue is asynq's default queue, used for events without a Topic.
const DefaultQueue = "default"

// Publisher enqueues each outbox event as one asynq task. It implements
// relay.Publisher and relay.Validator:
//
//	r, err := relay.New(db, outboxasynq.NewPublisher(client))
//
// For each event it enqueues a task
//
//   - whose type is the event's Type (or WithTaskType's),
//   - whose payload is the envelope as CloudEvents 1.0 JSON
//     (outbox.DecodeEnvelope reads it back; Handler does it for you),
//   - whose headers are the event's headers (traceparent, tracestate, …),
//   - into the queue named by the event's Topic (or WithQueue's; asynq's
//     "default" queue when empty),
//   - with the event id as its asynq TaskID, and WithMaxRetry, WithTimeout,
//     WithRetention (default DefaultRetention) and WithTaskOptions,
//   - and, WithKeyChain, for an event with a PartitionKey, headers naming
//     the task enqueued before it for that key (see KeyOrder).
//
// Delivery to asynq is at least once and, within the retention, at most
// one task per event: a redelivered event whose task still exists gets
// asynq.ErrTaskIDConflict, which Publish counts as delivered.
//
// A Publisher is safe for concurrent use.
type Publisher struct {
	client  *asynq.Client
	cfg     publisherConfig
	chain   *chain // WithKeyChain
	invalid error
}

// NewPublisher returns a Publisher that enqueues through client. Bad
// options (and a nil client) are reported by Validate, which relay.New
// calls; Publish refuses to run with them.
func NewPublisher(client *asynq.Client, opts ...Option) *Publisher {
	cfg := defaultPublisherConfig()
	if client == nil {
		cfg.Fail("asynq client is nil")
	}
	optionerr.Apply(&cfg, &cfg.Errors, opts)
	p := &Publisher{client: client, cfg: cfg, invalid: cfg.Err()}
	if cfg.chainRedis != nil {
		p.chain = &chain{rdb: cfg.chainRedis, insp: asynq.NewInspectorFromRedisClient(cfg.chainRedis)}
	}
	return p
}

// Validate reports the Publisher's configuration errors, each wrapping
// ErrInvalidOption, or nil. relay.New calls it and refuses an invalid
// Publisher.
func (p *Publisher) Validate() error { return p.invalid }

// Publish enqueues e as one asynq task and implements relay.Publisher.
//
// It returns nil once the task is in Redis, or when a task with the
// event's id already is in its queue (an earlier delivery of the same
// event). It returns an error marked outbox.Unavailable when Redis cannot
// be reached, times out, is loading, read-only, out of memory or refuses
// the connection, or when ctx ends first: the relay then retries later
// without spending the event's attempts. It returns an error marked
// outbox.Permanent, wrapping ErrInvalidTask, for an event that can never
// become a task (no id, or a blank mapped task type). Any other error
// (a Redis error reply such as WRONGTYPE, an invalid asynq option) is
// returned as an ordinary error, for the relay to retry with backoff. Every
// error names the event and the queue and wraps asynq's error.
//
// A failure does not tell whether the task was enqueued (a reply may be
// lost after Redis ran the command): the retry then finds the task and
// succeeds, so no event is enqueued twice within the retention.
func (p *Publisher) Publish(ctx context.Context, e *outbox.Envelope) error {
	if p.invalid != nil {
		return p.invalid
	}
	task, opts, queue, err := p.task(e)
	if err != nil {
		return err
	}
	if p.chain != nil && e.PartitionKey != "" {
		return p.publishChained(ctx, e, task, opts, queue)
	}
	_, err = p.client.EnqueueContext(ctx, task, opts...)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, asynq.ErrTaskIDConflict):
		p.cfg.Logger.DebugContext(ctx, "task already enqueued; counted as delivered",
			"event_id", e.ID, "event_type", e.Type, "queue", queue)
		return nil
	}
	return p.failed(ctx, e, queue, err)
}

// failed names the event and queue in err, an error of Redis or asynq,
// and marks it outbox.Unavailable when Redis is unreachable or cannot
// take writes.
func (p *Publisher) failed(ctx context.Context, e *outbox.Envelope, queue string, err error) error {
	down := redisdown.Outage(ctx, err) // classified on the original error, before ours names the event
	err = fmt.Errorf("outboxasynq: enqueueing event %s (%s) into queue %q: %w", e.ID, e.Type, queue, err)
	if down {
		p.cfg.Logger.DebugContext(ctx, "redis unavailable", "event_id", e.ID, "queue", queue, "error", err)
		return outbox.Unavailable(err)
	}
	return err
}

// task builds the asynq task of e, with its enqueue options.
func (p *Publisher) task(e *outbox.Envelope) (*asynq.Task, []asynq.Option, string, error) {
	if e == nil {
		return nil, nil, "", outbox.Permanent(fmt.Errorf("%w: nil envelope", ErrInvalidTask))
	}
	if strings.TrimSpace(e.ID) == "" {
		return nil, nil, "", outbox.Permanent(fmt.Errorf("%w: event of type %q has no id", ErrInvalidTask, e.Type))
	}
	typ := e.Type
	if p.cfg.taskType != nil {
		typ = p.cfg.taskType(e)
	}
	if strings.TrimSpace(typ) == "" {
		return nil, nil, "", outbox.Permanent(fmt.Errorf("%w: event %s (%s) maps to a blank task type", ErrInvalidTask, e.ID, e.Type))
	}
	queue := e.Topic
	if p.cfg.queue != nil {
		queue = p.cfg.queue(e)
	}
	if strings.TrimSpace(queue) == "" {
		queue = DefaultQueue
	}

	env := *e // the caller's envelope is not modified
	if env.Source == "" {
		env.Source = p.cfg.Source
	}
	payload, err := json.Marshal(&env)
	if err != nil {
		return nil, nil, "", outbox.Permanent(fmt.Errorf("%w: encoding event %s: %w", ErrInvalidTask, e.ID, err))
	}

	opts := make([]asynq.Option, 0, 6)
	if p.cfg.maxRetry >= 0 {
		opts = append(opts, asynq.MaxRetry(p.cfg.maxRetry))
	}
	if p.cfg.timeout > 0 {
		opts = append(opts, asynq.Timeout(p.cfg.timeout))
	}
	if p.cfg.retention > 0 {
		opts = append(opts, asynq.Retention(p.cfg.retention))
	}
	if p.cfg.extra != nil {
		opts = append(opts, p.cfg.extra(e)...)
	}
	opts = append(opts, asynq.Queue(queue), asynq.TaskID(e.ID))

	var headers map[string]string
	if len(e.Headers) > 0 {
		headers = maps.Clone(e.Headers)
	}
	return asynq.NewTaskWithHeaders(typ, payload, headers), opts, queue, nil
}

// Describe says where the Publisher enqueues, for relay heartbeats and
// "outbox stats" (it implements relay.Describer).
func (p *Publisher) Describe() string {
	if p.cfg.queue != nil {
		return "asynq queue chosen by WithQueue"
	}
	return "asynq queue " + DefaultQueue + " (or the event's Topic)"
}
