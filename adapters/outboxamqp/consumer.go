package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/relay"
)

// tracerName names the instrumentation scope of the consumer's spans.
const tracerName = "github.com/gormoutbox/outbox/adapters/outboxamqp"

// Consumer consumes outbox events from a queue and hands each to a
// Handler, acknowledging a message only after its handler succeeded. See
// the package documentation for its cycle. Run several consumers, in one
// process or many, on one queue to share its messages.
type Consumer struct {
	src     *connSource
	queue   string
	h       Handler
	cfg     consumerConfig
	log     *slog.Logger
	tracer  trace.Tracer
	invalid error

	running  atomic.Bool
	failures failureCounts
	pause    atomic.Int64 // the wait after a handler's outbox.Unavailable, in ns
}

// NewConsumer returns a Consumer of queue that passes each event to h.
// conn may be nil when WithDial is given. It returns an error wrapping
// ErrInvalidOption for a bad argument or option; it does not talk to the
// broker (Run does).
func NewConsumer(conn *amqp.Connection, queue string, h Handler, opts ...ConsumerOption) (*Consumer, error) {
	cfg := consumerConfig{
		common:         newCommon(),
		prefetch:       DefaultPrefetch,
		concurrency:    DefaultConcurrency,
		retryDelay:     DefaultRetryDelay,
		maxDeliveries:  DefaultMaxDeliveries,
		handlerTimeout: DefaultHandlerTimeout,
	}
	for _, o := range opts {
		if o == nil {
			cfg.Fail("nil option")
			continue
		}
		o.applyConsumer(&cfg)
	}
	switch {
	case conn == nil && cfg.dial == nil:
		cfg.Fail("connection is nil and no DialFunc (WithDial) is given")
	case queue == "":
		cfg.Fail("empty queue name")
	case len(queue) > maxShortStr:
		cfg.Fail("queue name is longer than %d bytes", maxShortStr)
	case h == nil:
		cfg.Fail("nil handler")
	}
	if v, ok := h.(relay.Validator); ok {
		if err := v.Validate(); err != nil {
			cfg.Add(err)
		}
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.tracerProvider == nil {
		cfg.tracerProvider = otel.GetTracerProvider()
	}
	log := cfg.logger.With(slog.String("queue", queue))
	c := &Consumer{
		src:     &connSource{conn: conn, dial: cfg.dial, log: log},
		queue:   queue,
		h:       h,
		cfg:     cfg,
		log:     log,
		tracer:  cfg.tracerProvider.Tracer(tracerName),
		invalid: cfg.Err(),
	}
	c.failures.m = map[string]int{}
	return c, c.invalid
}

// Validate reports the configuration errors (joined), each wrapping
// ErrInvalidOption, or nil.
func (c *Consumer) Validate() error { return c.invalid }

// Run consumes until ctx ends, then finishes the messages in hand and
// returns nil; messages received but not started go back to the queue.
// When the channel or connection closes, or consuming fails (a missing
// queue, a broker refusal), it logs the error and starts again after a
// backoff (100ms doubling to 5s), dialling a new connection when the
// current one is closed and WithDial is given. It returns an error only
// for an invalid configuration, or when the Consumer is already running.
// Connections it dialled are closed when it returns. amqp091 takes no
// context when it opens a channel or starts consuming: a broker that stops
// answering then holds Run until the connection's heartbeat gives up.
func (c *Consumer) Run(ctx context.Context) error {
	if c.invalid != nil {
		return c.invalid
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	defer c.src.release()
	c.log.Info("outboxamqp consumer started", "prefetch", c.cfg.prefetch, "concurrency", c.cfg.concurrency,
		"max_deliveries", c.cfg.maxDeliveries, "retry_delay", c.cfg.retryDelay)
	failures := 0
	for ctx.Err() == nil {
		began := time.Now()
		err := c.session(ctx)
		if ctx.Err() != nil {
			break
		}
		if time.Since(began) > time.Minute {
			failures = 0 // it ran for a while: start the backoff afresh
		}
		failures++
		wait := adapterkit.RetryStep(failures)
		level := slog.LevelError
		if adapterkit.Outage(ctx, err, amqpDown) {
			level = slog.LevelWarn
		}
		c.log.Log(ctx, level, "outboxamqp consumer: consuming stopped; starting again", "error", err, "retry_in", wait)
		adapterkit.Sleep(ctx, wait)
	}
	c.log.Info("outboxamqp consumer stopped")
	return nil
}

// session consumes on a new channel until it closes or ctx ends, and
// returns why it ended (nil for ctx).
func (c *Consumer) session(ctx context.Context) error {
	conn, err := c.src.get(ctx)
	if err != nil {
		return err
	}
	if c.cfg.topology != nil {
		if err := runTopology(ctx, conn, c.cfg.topology); err != nil {
			return err
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("%w: opening a channel: %w", ErrConnectionClosed, err)
	}
	defer func() { _ = ch.Close() }() // what was received and not settled goes back to the queue
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	if err := ch.Qos(c.cfg.prefetch, 0, false); err != nil {
		return fmt.Errorf("outboxamqp: setting prefetch %d: %w", c.cfg.prefetch, err)
	}
	deliveries, err := ch.Consume(c.queue, c.cfg.tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("outboxamqp: consuming from queue %q: %w", c.queue, err)
	}
	c.log.Debug("outboxamqp consumer: consuming", "addr", remoteAddr(conn))

	work := make(chan amqp.Delivery)
	var wg sync.WaitGroup
	for range c.cfg.concurrency {
		wg.Go(func() {
			for d := range work {
				c.process(ctx, d)
			}
		})
	}
	defer wg.Wait()
	defer close(work)
	for {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return c.ended(ch, closes)
			}
			select {
			case work <- d:
			case <-ctx.Done():
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// ended returns why the deliveries of ch ended: the channel closed, or
// the broker cancelled the consumer (its queue was deleted).
func (c *Consumer) ended(ch *amqp.Channel, closes chan *amqp.Error) error {
	if !ch.IsClosed() {
		return fmt.Errorf("outboxamqp: the broker cancelled consuming from queue %q (was it deleted?)", c.queue)
	}
	select {
	case e := <-closes:
		if e != nil {
			return fmt.Errorf("%w: %w", ErrConnectionClosed, e)
		}
	case <-time.After(time.Second):
	}
	return fmt.Errorf("%w: the channel closed", ErrConnectionClosed)
}

// amqpDown reports whether err is the connection's or channel's end
// rather than a refusal of the broker (such as a missing queue): the
// RabbitMQ part of the rule of relay.Publisher (adapterkit.Outage).
func amqpDown(err error) bool {
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return !ae.Server || !ae.Recover
	}
	return errors.Is(err, ErrConnectionClosed)
}
