package outboxasynq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel/attribute"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/semconv"
)

// Task is what asynq says of the task a handler runs for: the
// consume.Delivery's Details on this broker.
//
//	d, _ := consume.DeliveryFrom(ctx)
//	task := d.Details.(outboxasynq.Task)
type Task struct {
	// ID is the task's id: the event id, for tasks a Publisher enqueued.
	ID string
	// Queue is the queue the task was taken from.
	Queue string
	// Retried counts the earlier runs of the task that asynq counted as
	// failures (asynq.GetRetryCount): runs that IsFailure does not count
	// are left out, when the server uses IsFailure.
	Retried int
	// MaxRetry is the task's MaxRetry (asynq.GetMaxRetry, see WithMaxRetry).
	MaxRetry int
}

// Handler returns an asynq.Handler that runs h for each task a Publisher
// enqueued, with the policy of package consume, the same as on every
// broker: h's error decides the task's fate, spans, metrics and logs are
// consume's, and opts are consume's options (WithMaxDeliveries,
// WithRetryDelay, WithHandlerTimeout, WithRegistry, WithOnDead, WithLogger,
// WithTracerProvider, …):
//
//	mux := asynq.NewServeMux()
//	mux.Handle("order.created", outboxasynq.Handler(h, consume.WithMaxDeliveries(5)))
//	srv := asynq.NewServer(redisOpt, asynq.Config{
//		IsFailure:      outboxasynq.IsFailure,         // uncounted runs spend no retry
//		RetryDelayFunc: outboxasynq.RetryDelay(nil),   // the consumer's delays
//	})
//
// A task's fate is what ProcessTask returns to asynq:
//
//   - success: nil, and the task completes;
//   - dead (outbox.Permanent, consume.ErrBadPayload, a payload that is not
//     an envelope, or the last counted run failed): an error wrapping
//     asynq.SkipRetry and the reason, and asynq archives the task (see
//     NewDeadLetters);
//   - a failure: an error IsFailure counts, retried after the consumer's
//     doubling retry delay (RetryDelay);
//   - outbox.Unavailable, outbox.Snooze, idempotency.ErrInProgress: an
//     error IsFailure does not count, retried after the retry delay or the
//     snooze. After an outbox.Unavailable, the handler pauses as a
//     consumer does (1s doubling to 30s while it lasts): the tasks it gets
//     meanwhile are handed back at once, not run, and not counted.
//
// A task gets at most the lesser of WithMaxDeliveries and its MaxRetry
// counted runs (at least one): asynq archives a task on the run after
// MaxRetry failures whatever its error, so that run is kept for the
// uncounted ones, which would otherwise be archived. consume.DeliveryFrom
// gives the run's Delivery (Attempt is asynq's retry count plus one), its
// Details a Task. Keep WithHandlerTimeout (default 1 minute) below the
// tasks' asynq Timeout (default 30 minutes).
//
// Handler panics with the error of consume.New (wrapping
// consume.ErrInvalidOption) for a nil h or a bad option, as
// asynq.ServeMux.Handle does for a nil handler.
func Handler(h consume.Handler, opts ...consume.Option) asynq.Handler {
	err := consume.ApplyTransportOptions(&handlerConfig{}, opts)
	var rh consume.Handler
	if h != nil {
		rh = recorder{h}
	}
	c, cerr := consume.New(tasks{}, rh, opts...)
	if err := errors.Join(err, cerr); err != nil {
		panic(err)
	}
	return &handler{c: c, maxDeliveries: consume.SettingsOf(opts...).MaxDeliveries}
}

// handlerConfig is Handler's own configuration: none yet, so that an
// option of another adapter is reported.
type handlerConfig struct{}

// handler runs a consume.Consumer's policy on each task.
type handler struct {
	c             *consume.Consumer
	maxDeliveries int
	pause         pause
}

// ProcessTask implements asynq.Handler.
func (h *handler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	if left := h.pause.left(); left > 0 {
		return &retryError{delay: left, cause: errPaused}
	}
	m := newMessage(ctx, t, h.maxDeliveries)
	h.pause.after(h.c.Process(context.WithValue(ctx, messageKey{}, m), m))
	return m.result
}

// errPaused is the cause of a task handed back while the handler pauses.
var errPaused = errors.New("outboxasynq: a handler reported its dependency unavailable: paused, the task not run")

// pause is the handler's pause after an outbox.Unavailable, which
// consume.Consumer.Run makes between batches: 1s doubling to 30s while
// the dependency stays down.
type pause struct {
	mu    sync.Mutex
	until time.Time
	step  time.Duration
}

func (p *pause) left() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Until(p.until)
}

func (p *pause) after(unavailable bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !unavailable {
		p.step = 0
		return
	}
	p.step = adapterkit.NextPause(p.step, time.Second, 30*time.Second)
	p.until = time.Now().Add(p.step)
}

// tasks is the consume.Transport of Handler: asynq's server receives the
// tasks and calls ProcessTask, which hands each to Consumer.Process.
type tasks struct{}

func (tasks) System() string      { return "asynq" }
func (tasks) Destination() string { return "" } // each task's queue is in its Delivery

// Receive is not used: an asynq server runs the Consumer, not Run.
func (tasks) Receive(context.Context) ([]consume.Message, error) {
	return nil, errors.New("outboxasynq: an asynq server runs Handler; Consumer.Run has nothing to receive")
}

// messageKey keys the task's message in the handler's context, for
// recorder.
type messageKey struct{}

// recorder keeps the handler's error on the task's message, as the cause
// of the error ProcessTask returns for a retry.
type recorder struct{ h consume.Handler }

func (r recorder) Handle(ctx context.Context, e *outbox.Envelope) error {
	err := r.h.Handle(ctx, e)
	if m, ok := ctx.Value(messageKey{}).(*message); ok {
		m.handlerErr = err
	}
	return err
}

// Validate checks the wrapped handler (consume.Validator).
func (r recorder) Validate() error {
	if v, ok := r.h.(consume.Validator); ok {
		return v.Validate()
	}
	return nil
}

// message is one task, settled by setting what ProcessTask returns.
type message struct {
	task        *asynq.Task
	info        Task
	maxAttempts int
	handlerErr  error
	result      error
}

func newMessage(ctx context.Context, t *asynq.Task, maxDeliveries int) *message {
	m := &message{task: t, result: errors.New("outboxasynq: the task was not settled")}
	m.info.ID, _ = asynq.GetTaskID(ctx)
	m.info.Queue, _ = asynq.GetQueueName(ctx)
	m.info.Retried, _ = asynq.GetRetryCount(ctx)
	var ok bool
	if m.info.MaxRetry, ok = asynq.GetMaxRetry(ctx); !ok {
		m.info.MaxRetry = maxDeliveries // outside a server (a test): WithMaxDeliveries alone
	}
	m.maxAttempts = max(min(m.info.MaxRetry, maxDeliveries), 1)
	return m
}

// Envelope decodes the task's payload; the envelope's trace headers are
// the task's when it has none.
func (m *message) Envelope() (*outbox.Envelope, error) {
	e, err := Decode(m.task)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", consume.ErrMalformed, err)
	}
	if tp := m.task.Headers()["traceparent"]; tp != "" && e.Headers["traceparent"] == "" {
		e.Headers = maps.Clone(e.Headers)
		if e.Headers == nil {
			e.Headers = map[string]string{}
		}
		e.Headers["traceparent"], e.Headers["tracestate"] = tp, m.task.Headers()["tracestate"]
	}
	return e, nil
}

func (m *message) Begin(context.Context) (consume.Start, error) { return consume.Run, nil }

func (m *message) Delivery() consume.Delivery {
	return consume.Delivery{Destination: m.info.Queue, Attempt: m.info.Retried + 1, MaxAttempts: m.maxAttempts, Details: m.info}
}

func (m *message) Attributes() []attribute.KeyValue {
	return []attribute.KeyValue{semconv.MessageID.String(m.info.ID), semconv.AsynqTaskRetryCount.Int(m.info.Retried)}
}

func (m *message) Ack(context.Context) error { m.result = nil; return nil }

func (m *message) Retry(_ context.Context, delay time.Duration, counted bool) error {
	m.result = &retryError{delay: delay, counted: counted, cause: m.handlerErr}
	return nil
}

func (m *message) Dead(_ context.Context, reason error) error {
	m.result = fmt.Errorf("%w: %w", asynq.SkipRetry, reason)
	return nil
}

// retryError is what ProcessTask returns for a task to run again: after
// delay (RetryDelay), counted or not (IsFailure).
type retryError struct {
	delay   time.Duration
	counted bool
	cause   error // the handler's error, if it ran
}

func (e *retryError) Error() string {
	what := "retry"
	if !e.counted {
		what = "retry, not counted"
	}
	if e.cause == nil {
		return fmt.Sprintf("outboxasynq: %s in %v: released without running", what, e.delay)
	}
	return fmt.Sprintf("outboxasynq: %s in %v: %v", what, e.delay, e.cause)
}

func (e *retryError) Unwrap() error { return e.cause }

// Decode returns the envelope carried by a task that a Publisher
// enqueued. A payload that is not an envelope gives an error wrapping
// ErrInvalidTask, outbox.ErrInvalidEnvelope and asynq.SkipRetry, so that a
// handler returning it makes asynq archive the task without retrying.
func Decode(t *asynq.Task) (*outbox.Envelope, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil task (%w)", ErrInvalidTask, asynq.SkipRetry)
	}
	e, err := outbox.DecodeEnvelope(t.Payload())
	if err != nil {
		return nil, fmt.Errorf("%w: task of type %q: %w (%w)", ErrInvalidTask, t.Type(), err, asynq.SkipRetry)
	}
	return e, nil
}
