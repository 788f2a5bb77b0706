package consume

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/semconv"
)

// Outcomes of a message, as the attribute outbox.outcome of the metric
// outbox.consumer.messages.
const (
	outcomeAcked    = "acked"
	outcomeRetried  = "retried"  // a counted failure, delivered again later
	outcomeReleased = "released" // delivered again later, not counted
	outcomeDead     = "dead"
)

var attrOutcome = attribute.Key("outbox.outcome")

// metrics are a Consumer's instruments:
//
//   - outbox.consumer.messages {message}: messages settled, by
//     outbox.outcome (acked, retried, released, dead), messaging.system
//     and messaging.destination.name;
//   - outbox.consumer.handle.duration (s): handler runs, by
//     outbox.outcome (ok, error).
type metrics struct {
	messages metric.Int64Counter
	duration metric.Float64Histogram
	common   []attribute.KeyValue
}

func newMetrics(mp metric.MeterProvider, t Transport) (*metrics, error) {
	m := mp.Meter(scopeName)
	in := &metrics{common: []attribute.KeyValue{
		semconv.MessagingSystem.String(t.System()), semconv.Destination.String(t.Destination()),
	}}
	var err error
	if in.messages, err = m.Int64Counter("outbox.consumer.messages", metric.WithUnit("{message}"),
		metric.WithDescription("Messages a consumer settled, by outcome: acked, retried (a counted failure), released (delivered again, not counted), dead.")); err != nil {
		return nil, err
	}
	if in.duration, err = m.Float64Histogram("outbox.consumer.handle.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a consumer's handler ran, by outcome: ok or error.")); err != nil {
		return nil, err
	}
	return in, nil
}

func (m *metrics) count(ctx context.Context, outcome string) {
	m.messages.Add(ctx, 1, metric.WithAttributes(append(m.common, attrOutcome.String(outcome))...))
}

func (m *metrics) handled(ctx context.Context, took time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.duration.Record(ctx, took.Seconds(), metric.WithAttributes(append(m.common, attrOutcome.String(outcome))...))
}

// maxLoggedIDs bounds the event ids one log line names per outcome.
const maxLoggedIDs = 20

// tally counts a batch's outcomes for its log lines: one per batch, not
// per message.
type tally struct {
	mu                                                                   sync.Mutex
	acked, failed, snoozed, unavailable, released, gone, dead, unsettled outcomeTally
}

type outcomeTally struct {
	n     int
	ids   []string
	first error
}

func (t *tally) add(o *outcomeTally, e *outbox.Envelope, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	o.n++
	if e != nil && len(o.ids) < maxLoggedIDs {
		o.ids = append(o.ids, e.ID)
	}
	if o.first == nil {
		o.first = err
	}
}

// log writes the batch's lines: an error line for dead messages and for
// messages that could not be settled, a warning for failed runs and for a
// dependency unavailable, and a debug line with every count.
func (t *tally) log(ctx context.Context, log *slog.Logger, received int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.dead.n > 0 {
		log.ErrorContext(ctx, "consumer: messages dead; moved to the dead letter", "dead", t.dead.n,
			"event_ids", t.dead.ids, "first_reason", t.dead.first)
	}
	if t.unsettled.n > 0 {
		log.ErrorContext(ctx, "consumer: messages could not be settled; the broker delivers them again", "messages", t.unsettled.n,
			"event_ids", t.unsettled.ids, "first_error", t.unsettled.first)
	}
	if t.failed.n > 0 {
		log.WarnContext(ctx, "consumer: handler runs failed; delivered again later", "failed", t.failed.n,
			"event_ids", t.failed.ids, "first_error", t.failed.first)
	}
	if t.unavailable.n > 0 {
		log.WarnContext(ctx, "consumer: a handler's dependency is unavailable; delivered again later, not counted",
			"event_ids", t.unavailable.ids, "first_error", t.unavailable.first, "released", t.released.n)
	}
	log.DebugContext(ctx, "consumer: batch handled", "received", received, "acked", t.acked.n, "failed", t.failed.n,
		"snoozed", t.snoozed.n, "unavailable", t.unavailable.n, "released", t.released.n, "gone", t.gone.n, "dead", t.dead.n)
}

// DeadLetter is a message that will not be handled again, as WithOnDead
// receives it: not an outbox event (ErrMalformed), failed with
// outbox.Permanent, failed its last counted run or delivered again after
// it (ErrTooManyDeliveries). The transport moved it to its dead letter.
type DeadLetter struct {
	// Envelope is the event, or nil for a message that is not one.
	Envelope *outbox.Envelope
	// Delivery describes the last run (its Details the broker's).
	Delivery Delivery
	// Reason wraps the handler's error, ErrMalformed or
	// ErrTooManyDeliveries.
	Reason error
}
