package outboxredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/adapterkit/redisdown"
	"github.com/gormoutbox/outbox/relay"
)

// tracerName names the instrumentation scope of the consumer's spans.
const tracerName = "github.com/gormoutbox/outbox/adapters/outboxredis"

// Consumer reads outbox events from a Redis stream as one consumer of a
// consumer group and hands them to a Handler, acknowledging each message
// only after its handler succeeded. See the package documentation for its
// cycle. Run many consumers, under different names, in one group to share
// a stream's messages.
type Consumer struct {
	rdb    redis.UniversalClient
	stream string
	group  string
	name   string
	h      Handler
	cfg    consumerConfig
	log    *slog.Logger
	tracer trace.Tracer

	excusedKey string // see ExcusedKey

	running atomic.Bool
	// Used by Run's goroutine only:
	cursor  string          // XAUTOCLAIM's next start
	waiting map[string]bool // own pending messages waiting for their predecessor (WithKeyOrder)
	keep    *keeper         // the entries Run holds, kept from being adopted
}

// NewConsumer returns a Consumer named consumer in the group of stream,
// that passes each event to h. The name must be unique within the group
// and stable across restarts: a restarted consumer retries the messages
// it left pending. A bad argument or option is reported by Validate, which
// Run calls.
func NewConsumer(rdb redis.UniversalClient, stream, group, consumer string, h Handler, opts ...ConsumerOption) *Consumer {
	cfg := consumerConfig{
		common:        newCommon(),
		startID:       DefaultStartID,
		block:         DefaultBlock,
		count:         DefaultCount,
		minIdle:       DefaultMinIdle,
		retryDelay:    DefaultRetryDelay,
		maxDeliveries: DefaultMaxDeliveries,
	}
	for _, o := range opts {
		if o == nil {
			cfg.Fail("nil option")
			continue
		}
		o.applyConsumer(&cfg)
	}
	switch {
	case rdb == nil:
		cfg.Fail("nil redis client")
	case stream == "":
		cfg.Fail("empty stream")
	case group == "":
		cfg.Fail("empty group")
	case consumer == "":
		cfg.Fail("empty consumer name")
	case h == nil:
		cfg.Fail("nil handler")
	}
	if v, ok := h.(relay.Validator); ok {
		if err := v.Validate(); err != nil {
			cfg.Add(err)
		}
	}
	cfg.fillDefaults()
	return &Consumer{
		rdb:        rdb,
		stream:     stream,
		group:      group,
		name:       consumer,
		h:          h,
		cfg:        cfg,
		log:        cfg.logger.With(slog.String("stream", stream), slog.String("group", group), slog.String("consumer", consumer)),
		tracer:     cfg.tracerProvider.Tracer(tracerName),
		cursor:     "0-0",
		waiting:    map[string]bool{},
		excusedKey: ExcusedKey(stream, group),
	}
}

// fillDefaults sets what the options left unset and derives from others:
// the handler timeout (the minimum idle time), the claim interval (half
// the shorter of the minimum idle time, the retry delay and 20s), slog's
// default logger and OpenTelemetry's global tracer provider.
func (cfg *consumerConfig) fillDefaults() {
	if cfg.handlerTimeout == 0 {
		cfg.handlerTimeout = cfg.minIdle
	}
	if cfg.claimInterval == 0 {
		cfg.claimInterval = max(min(cfg.minIdle, cfg.retryDelay, 20*time.Second)/2, time.Millisecond)
	}
	if cfg.logger == nil {
		cfg.logger = slog.Default()
	}
	if cfg.tracerProvider == nil {
		cfg.tracerProvider = otel.GetTracerProvider()
	}
}

// Validate reports the configuration errors (joined), each wrapping
// ErrInvalidOption, or nil.
func (c *Consumer) Validate() error { return c.cfg.Err() }

// Run consumes until ctx ends, then finishes the message in hand and
// returns nil. It creates the consumer group if it is missing (XGROUP
// CREATE … MKSTREAM at WithStartID), and again if it disappears. Redis
// errors are logged and retried with backoff (100ms doubling to 5s); Run
// returns an error only for an invalid configuration or when the Consumer
// is already running.
func (c *Consumer) Run(ctx context.Context) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.keep = newKeeper(c)
	defer c.keep.close()
	c.log.Info("outboxredis consumer started", "min_idle", c.cfg.minIdle, "retry_delay", c.cfg.retryDelay,
		"max_deliveries", c.cfg.maxDeliveries, "count", c.cfg.count)

	var (
		st       loopState
		failures int
		pause    time.Duration // after a handler reported its transport unavailable
	)
	for ctx.Err() == nil {
		unavailable, err := c.round(ctx, &st)
		switch {
		case err != nil && ctx.Err() == nil:
			if isNoGroup(err) {
				st.groupReady = false
			}
			failures++
			wait := adapterkit.RetryStep(failures)
			level := slog.LevelError
			if redisdown.Outage(ctx, err) {
				level = slog.LevelWarn
			}
			c.log.Log(ctx, level, "outboxredis consumer: redis command failed; retrying", "error", err, "retry_in", wait)
			adapterkit.Sleep(ctx, wait)
		case unavailable:
			failures = 0
			pause = adapterkit.NextPause(pause, time.Second, 30*time.Second)
			c.log.Warn("outboxredis consumer: handler reported its transport unavailable; pausing", "retry_in", pause)
			adapterkit.Sleep(ctx, pause)
		default:
			failures, pause = 0, 0
		}
	}
	c.log.Info("outboxredis consumer stopped")
	return nil
}

// loopState is what Run carries from one round to the next.
type loopState struct {
	groupReady bool
	nextClaim  time.Time
	more       bool // the last claim was full: claim again without waiting
}

// round makes the group if needed, retries and claims pending messages when
// due, then reads and handles new ones. It reports whether a handler said
// its transport is unavailable (the rest of its batch is left pending).
func (c *Consumer) round(ctx context.Context, st *loopState) (unavailable bool, err error) {
	if !st.groupReady {
		if err := c.createGroup(ctx); err != nil {
			return false, err
		}
		st.groupReady = true
	}
	if now := time.Now(); st.more || !now.Before(st.nextClaim) {
		st.nextClaim = now.Add(c.cfg.claimInterval)
		more, unavailable, err := c.recoverPending(ctx)
		st.more = more
		c.pollWaiting(st)
		if err != nil || unavailable || ctx.Err() != nil {
			return unavailable, err
		}
	}
	block := min(c.cfg.block, max(time.Until(st.nextClaim), time.Millisecond))
	if st.more {
		block = -1 // no BLOCK: there is more to claim
	}
	readAt := time.Now()
	msgs, err := c.read(ctx, block)
	if err != nil {
		return false, err
	}
	unavailable = c.processBatch(ctx, msgs, readAt)
	c.pollWaiting(st)
	return unavailable, nil
}

// pollWaiting brings the next look at pending messages forward when some
// wait for their predecessors (WithKeyOrder).
func (c *Consumer) pollWaiting(st *loopState) {
	if t := time.Now().Add(c.orderPoll()); len(c.waiting) > 0 && t.Before(st.nextClaim) {
		st.nextClaim = t
	}
}

// createGroup makes the consumer group, and the stream if missing.
func (c *Consumer) createGroup(ctx context.Context) error {
	err := c.rdb.XGroupCreateMkStream(ctx, c.stream, c.group, c.cfg.startID).Err()
	var rerr redis.Error
	if errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "BUSYGROUP ") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("outboxredis: creating group %s of %s: %w", c.group, c.stream, err)
	}
	c.log.Info("outboxredis consumer group created", "start_id", c.cfg.startID)
	return nil
}

// read takes new messages (XREADGROUP … >), waiting up to block for them
// (a negative block does not wait).
func (c *Consumer) read(ctx context.Context, block time.Duration) ([]redis.XMessage, error) {
	res, err := c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group:    c.group,
		Consumer: c.name,
		Streams:  []string{c.stream, ">"},
		Count:    c.cfg.count,
		Block:    block,
	}).Result()
	if errors.Is(err, redis.Nil) || (err != nil && ctx.Err() != nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("outboxredis: XREADGROUP %s: %w", c.stream, err)
	}
	var msgs []redis.XMessage
	for _, s := range res {
		msgs = append(msgs, s.Messages...)
	}
	return msgs, nil
}
