package outboxasynq

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/hibiken/asynq"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/optionerr"
	"github.com/gormoutbox/outbox/internal/semconv"
)

// ScopeName is the OpenTelemetry instrumentation scope of the package's
// tracer.
const ScopeName = "github.com/gormoutbox/outbox/adapters/outboxasynq"

// HandlerFunc handles one event delivered as an asynq task. Its error
// decides the task's fate: nil completes it; outbox.Permanent(err)
// archives it at once (asynq.SkipRetry); any other error lets asynq retry
// it, up to the task's MaxRetry (see IsFailure for errors that should not
// count). An archived task is asynq's business: the outbox event stays
// published. The envelope's Attempt is the relay's count; asynq's is in
// DeliveryFrom(ctx).
type HandlerFunc func(ctx context.Context, e *outbox.Envelope) error

type handlerConfig struct {
	tp       trace.TracerProvider
	logger   *slog.Logger
	registry *outbox.Registry
	optionerr.Errors
}

type handlerOption func(*handlerConfig)

func (f handlerOption) applyHandler(c *handlerConfig) { f(c) }

// WithTracerProvider sets the OpenTelemetry TracerProvider of the consumer
// spans Handler starts (default otel.GetTracerProvider(), the global
// one). A nil one makes Handler panic.
func WithTracerProvider(tp trace.TracerProvider) HandlerOption {
	return handlerOption(func(c *handlerConfig) {
		if tp == nil {
			c.Fail("tracer provider is nil")
		}
		c.tp = tp
	})
}

// Handler returns an asynq.Handler that decodes the task's payload into
// the outbox.Envelope a Publisher wrote and calls fn with it:
//
//	mux := asynq.NewServeMux()
//	mux.Handle("order.created", outboxasynq.Handler(func(ctx context.Context, e *outbox.Envelope) error {
//		var o Order
//		if err := e.Unmarshal(&o); err != nil {
//			return outbox.Permanent(err)
//		}
//		return ship(ctx, o)
//	}))
//
// It guarantees that
//
//   - a payload that is not an envelope is not retried: the task is
//     archived with an error wrapping ErrInvalidTask,
//     outbox.ErrInvalidEnvelope and asynq.SkipRetry (and logged at error
//     level); fn is not called;
//   - fn runs in a consumer span named "outbox consume <event type>",
//     continuing the trace the envelope carries (its traceparent and
//     tracestate, or else the task's headers): a child of the relay's
//     "outbox publish" span when the relay traces, else of the span that
//     emitted the event. Its attributes are those of every adapter
//     (the messaging system and queue, the event's CloudEvents id, type
//     and source, outbox.event.attempt) and the task's retry count; a failure is recorded
//     on the span, and ctx carries the span to fn;
//   - an error of fn marked outbox.Permanent also wraps asynq.SkipRetry,
//     so that asynq archives the task instead of retrying it; other errors
//     are returned as they are.
//
// Handler panics if fn is nil, or with the joined errors (each wrapping
// ErrInvalidOption) of invalid options, like
// asynq.ServeMux.Handle with a nil handler.
func Handler(fn HandlerFunc, opts ...HandlerOption) asynq.Handler {
	if fn == nil {
		panic("outboxasynq: Handler(nil)")
	}
	cfg := handlerConfig{logger: slog.Default(), Errors: optionerr.Errors{Sentinel: ErrInvalidOption}}
	for _, o := range opts {
		if o == nil {
			cfg.Fail("Handler: nil option")
			continue
		}
		o.applyHandler(&cfg)
	}
	if err := cfg.Err(); err != nil {
		panic(err)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	return &handler{fn: fn, tracer: cfg.tp.Tracer(ScopeName), log: cfg.logger, registry: cfg.registry}
}

type handler struct {
	fn       HandlerFunc
	tracer   trace.Tracer
	log      *slog.Logger
	registry *outbox.Registry
}

// ProcessTask implements asynq.Handler.
func (h *handler) ProcessTask(ctx context.Context, t *asynq.Task) error {
	e, err := envelopeOf(ctx, t)
	if err != nil {
		h.log.ErrorContext(ctx, "task payload is not an outbox envelope; archived without retry",
			"task_type", t.Type(), "task_id", taskID(ctx), "error", err)
		return err
	}
	queue, _ := asynq.GetQueueName(ctx)
	retried, _ := asynq.GetRetryCount(ctx)
	attrs := semconv.ProcessAttributes("asynq", queue, e,
		semconv.MessageID.String(e.ID),
		semconv.AsynqTaskRetryCount.Int(retried))
	err = adapterkit.Process(ctx, h.tracer, "outbox consume "+e.Type, carrier(e, t), attrs, func(ctx context.Context) error {
		e, err := checked(h.registry, e)
		if err != nil {
			return err
		}
		return h.fn(withEnvelope(ctx, t, e), e)
	})
	if outbox.IsPermanent(err) && !errors.Is(err, asynq.SkipRetry) {
		return fmt.Errorf("%w: %w", asynq.SkipRetry, err)
	}
	return err
}

// carrier returns the W3C trace headers of e, or of t when e has none.
func carrier(e *outbox.Envelope, t *asynq.Task) propagation.MapCarrier {
	if e.Headers["traceparent"] != "" {
		return propagation.MapCarrier(e.Headers)
	}
	return propagation.MapCarrier(t.Headers())
}

func taskID(ctx context.Context) string {
	id, _ := asynq.GetTaskID(ctx)
	return id
}

// decodedKey keys the envelope a middleware decoded, so that Handler does
// not decode the same task again.
type decodedKey struct{}

type decoded struct {
	task *asynq.Task
	env  *outbox.Envelope
}

// envelopeOf decodes the envelope of t, or returns the one a middleware of
// this package decoded for the same task.
func envelopeOf(ctx context.Context, t *asynq.Task) (*outbox.Envelope, error) {
	if d, ok := ctx.Value(decodedKey{}).(decoded); ok && d.task == t {
		return d.env, nil
	}
	return Decode(t)
}

// withEnvelope returns ctx remembering that e is the envelope of t.
func withEnvelope(ctx context.Context, t *asynq.Task, e *outbox.Envelope) context.Context {
	return context.WithValue(ctx, decodedKey{}, decoded{task: t, env: e})
}

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
