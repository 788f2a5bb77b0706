package consume

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// scopeName is the instrumentation scope of the consumer's spans and
// metrics.
const scopeName = "github.com/gormoutbox/outbox/consume"

// Consumer reads messages from a Transport and hands each event to a
// Handler, with the policy documented on Handler: the same on every
// broker. Make one with a broker adapter's NewConsumer (or New, for a
// Transport of your own) and call Run.
type Consumer struct {
	t      Transport
	h      Handler
	cfg    settings
	log    *slog.Logger
	tracer trace.Tracer
	m      *metrics

	running atomic.Bool
}

// New returns a Consumer that reads from t and passes each event to h,
// configured by the shared options of opts (the transport's own, made by
// TransportOption, are its adapter's business and are skipped here). It
// returns an error wrapping ErrInvalidOption, and no Consumer, for a nil t
// or h, a bad option, or a handler whose Validate fails (such as
// Idempotent with a nil store).
func New(t Transport, h Handler, opts ...Option) (*Consumer, error) {
	s := newSettings(opts)
	if t == nil {
		s.Fail("nil transport")
	}
	if h == nil {
		s.Fail("nil handler")
	} else if err := validate(h); err != nil {
		s.Add(err)
	}
	if err := s.Err(); err != nil {
		return nil, err
	}
	s.fillDefaults(t)
	c := &Consumer{
		t: t, h: h, cfg: s,
		log:    s.logger.With(slog.String("messaging_system", t.System()), slog.String("destination", t.Destination())),
		tracer: s.tracerProvider.Tracer(scopeName),
	}
	var err error
	if c.m, err = newMetrics(s.meterProvider, t); err != nil {
		return nil, fmt.Errorf("consume: metrics: %w", err)
	}
	return c, nil
}

// HandlerTimeouter is implemented by transports whose broker bounds how
// long a message may stay unacknowledged: its value is the default of
// WithHandlerTimeout.
type HandlerTimeouter interface {
	HandlerTimeout() time.Duration
}

// fillDefaults sets what the options left unset.
func (s *settings) fillDefaults(t Transport) {
	if s.handlerTimeout == 0 {
		s.handlerTimeout = DefaultHandlerTimeout
		if ht, ok := t.(HandlerTimeouter); ok && ht.HandlerTimeout() > 0 {
			s.handlerTimeout = ht.HandlerTimeout()
		}
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	if s.tracerProvider == nil {
		s.tracerProvider = otel.GetTracerProvider()
	}
	if s.meterProvider == nil {
		s.meterProvider = otel.GetMeterProvider()
	}
	s.maxRetryDelay = max(s.maxRetryDelay, s.retryDelay)
}

// pauseFloor and pauseCeiling bound the pause after a handler reported its
// dependency unavailable: 1s doubling to 30s while it lasts.
const (
	pauseFloor   = time.Second
	pauseCeiling = 30 * time.Second
)

// Run consumes until ctx ends, then finishes the messages in hand,
// releases the rest of their batch (delivered again later, not counted)
// and returns nil. Errors of the transport are logged and retried with
// backoff (100ms doubling to 5s); after a handler reported its dependency
// unavailable, Run pauses (1s doubling to 30s while it lasts). Run returns
// an error only when the Consumer is already running.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.log.Info("consumer started", "concurrency", c.cfg.concurrency, "max_deliveries", c.cfg.maxDeliveries,
		"retry_delay", c.cfg.retryDelay, "handler_timeout", c.cfg.handlerTimeout)
	var (
		failures int
		pause    time.Duration
	)
	for ctx.Err() == nil {
		msgs, err := c.t.Receive(ctx)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			failures++
			wait := adapterkit.RetryStep(failures)
			c.log.Log(ctx, c.receiveLevel(ctx, err), "consumer: receiving failed; retrying", "error", err, "retry_in", wait)
			adapterkit.Sleep(ctx, wait)
			continue
		}
		failures = 0
		if len(msgs) == 0 {
			continue
		}
		if !c.handleBatch(ctx, msgs) {
			pause = 0
			continue
		}
		pause = adapterkit.NextPause(pause, pauseFloor, pauseCeiling)
		c.log.Warn("consumer: a handler reported its dependency unavailable; pausing", "retry_in", pause)
		adapterkit.Sleep(ctx, pause)
	}
	if cl, ok := c.t.(Closer); ok {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		if err := cl.Close(cctx); err != nil {
			c.log.Warn("consumer: closing the transport failed", "error", err)
		}
	}
	c.log.Info("consumer stopped")
	return nil
}

// receiveLevel is the level of a failed Receive: a warning when the
// broker is down, an error otherwise.
func (c *Consumer) receiveLevel(ctx context.Context, err error) slog.Level {
	if ot, ok := c.t.(OutageTeller); ok && ot.Outage(err) {
		return slog.LevelWarn
	}
	if adapterkit.Outage(ctx, err, nil) || errors.Is(err, context.DeadlineExceeded) {
		return slog.LevelWarn
	}
	return slog.LevelError
}
