package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// tracerName names the instrumentation scope of the consumer's spans.
const tracerName = "github.com/gormoutbox/outbox/adapters/outboxnats"

// opTimeout bounds the JetStream requests the consumer makes for a
// message (a dead-letter publish) or for itself (creating the durable).
const opTimeout = 5 * time.Second

// maxExcused bounds the deliveries a Consumer remembers as excused; past
// it, it forgets them all (they then count).
const maxExcused = 100_000

// Consumer reads outbox events from a JetStream stream through a durable
// pull consumer and hands them to a Handler, one at a time, acknowledging
// each message only after its handler succeeded. See the package
// documentation for its cycle. Run several Consumers (in one process or
// many) with the same durable name to share a stream's messages.
type Consumer struct {
	js      jetstream.JetStream
	stream  string
	durable string
	h       Handler
	cfg     consumerConfig
	log     *slog.Logger
	tracer  trace.Tracer

	running atomic.Bool
	// Used by Run's goroutine only:
	cons    jetstream.Consumer
	excused map[uint64]int // stream sequence → deliveries that do not count
}

// NewConsumer returns a Consumer of the durable pull consumer named
// durable on stream, that passes each event to h. Run creates the durable
// consumer, or updates its configuration. It returns an error wrapping
// ErrInvalidOption, and no Consumer, for a nil js or h, an invalid stream
// or durable name, a bad option, or an invalid h (such as Idempotent with
// a nil store).
func NewConsumer(js jetstream.JetStream, stream, durable string, h Handler, opts ...ConsumerOption) (*Consumer, error) {
	cfg := consumerConfig{
		common:        newCommon(),
		batch:         DefaultBatch,
		fetchWait:     DefaultFetchWait,
		ackWait:       DefaultAckWait,
		maxDeliveries: DefaultMaxDeliveries,
		retryDelay:    DefaultRetryDelay,
		maxRetryDelay: DefaultMaxRetryDelay,
	}
	for _, o := range opts {
		if o == nil {
			cfg.Fail("nil option")
			continue
		}
		o.applyConsumer(&cfg)
	}
	switch {
	case js == nil:
		cfg.Fail("nil JetStream")
	case h == nil:
		cfg.Fail("nil handler")
	}
	if err := checkName("stream", stream); err != nil {
		cfg.Fail("%v", err)
	}
	if err := checkName("durable", durable); err != nil {
		cfg.Fail("%v", err)
	}
	if v, ok := h.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			cfg.Add(err)
		}
	}
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	if cfg.handlerTimeout == 0 {
		cfg.handlerTimeout = cfg.ackWait
	}
	if cfg.tracerProvider == nil {
		cfg.tracerProvider = otel.GetTracerProvider()
	}
	return &Consumer{
		js: js, stream: stream, durable: durable, h: h, cfg: cfg,
		log:     cfg.logger.With(slog.String("stream", stream), slog.String("consumer", durable)),
		tracer:  cfg.tracerProvider.Tracer(tracerName),
		excused: map[uint64]int{},
	}, nil
}

// checkName reports why name cannot name a stream or a consumer.
func checkName(what, name string) error {
	if name == "" {
		return fmt.Errorf("empty %s name", what)
	}
	if strings.ContainsAny(name, ".*> \t\r\n/\\") {
		return fmt.Errorf("%s name %q holds one of . * > / \\ or white space", what, name)
	}
	return nil
}

// Run consumes until ctx ends, then finishes the message in hand, hands
// back the rest of its batch (Nak) and returns nil. It creates the durable
// consumer, or updates it (CreateOrUpdateConsumer), before the first fetch
// and whenever it disappears. JetStream errors are logged and retried with
// backoff (100ms doubling to 5s); Run returns an error only when the
// Consumer is already running.
func (c *Consumer) Run(ctx context.Context) error {
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.log.Info("outboxnats consumer started", "filter_subject", c.cfg.filterSubject, "ack_wait", c.cfg.ackWait,
		"max_deliveries", c.cfg.maxDeliveries, "batch", c.cfg.batch)
	var (
		failures int
		pause    time.Duration // after a handler reported its transport unavailable
	)
	for ctx.Err() == nil {
		unavailable, err := c.round(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			if consumerGone(err) {
				c.cons = nil
			}
			failures++
			wait := adapterkit.RetryStep(failures)
			level := slog.LevelError
			if adapterkit.Outage(ctx, err, natsDown) || consumerGone(err) {
				level = slog.LevelWarn
			}
			c.log.Log(ctx, level, "outboxnats consumer: JetStream request failed; retrying", "error", err, "retry_in", wait)
			adapterkit.Sleep(ctx, wait)
		case unavailable:
			failures = 0
			pause = adapterkit.NextPause(pause, time.Second, 30*time.Second)
			c.log.Warn("outboxnats consumer: handler reported its transport unavailable; pausing", "retry_in", pause)
			adapterkit.Sleep(ctx, pause)
		default:
			failures, pause = 0, 0
		}
	}
	c.log.Info("outboxnats consumer stopped")
	return nil
}

// round makes sure the durable consumer exists, fetches a batch and
// handles it. It reports whether a handler said its transport is
// unavailable (the rest of its batch is handed back). The batch's
// messages are kept in progress from their arrival until each is settled
// (keeper): one waiting behind the others, or running long, is not
// delivered to another consumer meanwhile.
func (c *Consumer) round(ctx context.Context) (unavailable bool, err error) {
	if c.cons == nil {
		if c.cons, err = c.ensure(ctx); err != nil {
			return false, err
		}
	}
	batch, err := c.cons.Fetch(c.cfg.batch, jetstream.FetchMaxWait(c.cfg.fetchWait))
	if err != nil {
		return false, fmt.Errorf("outboxnats: fetching from %s/%s: %w", c.stream, c.durable, err)
	}
	k := keep(c.cfg.ackWait / 3)
	defer k.close()
	queue := make(chan keptMsg, c.cfg.batch)
	go func() {
		defer close(queue)
		for msg := range batch.Messages() {
			queue <- k.add(msg)
		}
	}()
	for msg := range queue {
		switch {
		case ctx.Err() != nil || unavailable:
			// Handed back with a delay: without one, the message would
			// come back at once into this fetch, which stays open until
			// its wait ends.
			c.handBack(msg, c.cfg.retryDelay)
		default:
			unavailable = c.process(ctx, msg)
		}
		k.drop(msg.Msg) // settled, or not a JetStream message
	}
	if err := batch.Error(); err != nil && ctx.Err() == nil {
		return unavailable, fmt.Errorf("outboxnats: fetching from %s/%s: %w", c.stream, c.durable, err)
	}
	return unavailable, nil
}

// ensure creates the durable consumer, or updates its configuration.
func (c *Consumer) ensure(ctx context.Context) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       c.cfg.ackWait,
		MaxDeliver:    -1,
		FilterSubject: c.cfg.filterSubject,
	}
	if c.cfg.configure != nil {
		c.cfg.configure(&cfg)
	}
	cfg.Durable, cfg.AckPolicy = c.durable, jetstream.AckExplicitPolicy
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	cons, err := c.js.CreateOrUpdateConsumer(cctx, c.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("outboxnats: creating or updating consumer %s of stream %s: %w", c.durable, c.stream, err)
	}
	c.log.Info("outboxnats consumer ready")
	return cons, nil
}

// consumerGone reports whether err says that the durable consumer or its
// stream no longer exists, so that it must be created again.
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerDoesNotExist)
}
