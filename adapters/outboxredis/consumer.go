package outboxredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/adapterkit/redisdown"
)

// NewConsumer returns a Consumer of stream named consumer in group, that
// passes each event to h. The name must be unique within the group and
// stable across restarts: a restarted consumer retries the messages it
// left pending. opts are consume's shared options (WithMaxDeliveries,
// WithRetryDelay, WithHandlerTimeout, WithConcurrency, WithOnDead,
// WithLogger, …) and this package's (WithMinIdle, WithCount, WithBlock,
// WithStartID, WithClaimInterval, WithKeyOrder, WithDeadLetterStream).
// It returns an error wrapping consume.ErrInvalidOption, and no Consumer,
// for a bad argument or option.
func NewConsumer(rdb redis.UniversalClient, stream, group, consumer string, h consume.Handler, opts ...consume.Option) (*consume.Consumer, error) {
	cfg := consumerConfig{startID: DefaultStartID, block: DefaultBlock, count: DefaultCount, minIdle: DefaultMinIdle}
	errs := []error{consume.ApplyTransportOptions(&cfg, opts)}
	for _, arg := range []struct {
		bad  bool
		what string
	}{{rdb == nil, "nil redis client"}, {stream == "", "empty stream"}, {group == "", "empty group"}, {consumer == "", "empty consumer name"}} {
		if arg.bad {
			errs = append(errs, fmt.Errorf("%w: outboxredis.NewConsumer: %s", consume.ErrInvalidOption, arg.what))
		}
	}
	s := consume.SettingsOf(opts...)
	if cfg.claimInterval == 0 {
		cfg.claimInterval = max(min(cfg.minIdle, s.RetryDelay, 20*time.Second)/2, time.Millisecond)
	}
	t := &transport{rdb: rdb, stream: stream, group: group, name: consumer, cfg: cfg,
		retryDelay: s.RetryDelay, excusedKey: ExcusedKey(stream, group), cursor: "0-0", listFrom: "-", due: map[string]time.Time{},
		log: s.Logger.With(slog.String("stream", stream), slog.String("group", group), slog.String("consumer", consumer))}
	c, err := consume.New(t, h, opts...)
	if err := errors.Join(append(errs, err)...); err != nil {
		return nil, err
	}
	return c, nil
}

// transport reads a stream as one consumer of a group: the
// consume.Transport of NewConsumer.
type transport struct {
	rdb                 redis.UniversalClient
	stream, group, name string
	cfg                 consumerConfig
	retryDelay          time.Duration // consume.WithRetryDelay: the due time of what it does not know
	excusedKey          string        // see ExcusedKey
	log                 *slog.Logger

	// Used by Receive's goroutine only (and Close, after the last Receive):
	groupReady bool
	cursor     string    // XAUTOCLAIM's next start
	listFrom   string    // the next listing's start (listOwn)
	nextClaim  time.Time // next look for entries to adopt and unknown pending ones
	more       bool      // the last look came back full: look again at once
	readNext   bool      // the last Receive returned due entries: read new ones now
	keep       *keeper   // the entries this consumer holds, kept from being adopted

	mu       sync.Mutex
	due      map[string]time.Time // held entries handed back (Retry), by when they are due again (zero: at the next poll)
	nextPoll time.Time            // in key order, when the entries handed back without a delay are due
}

// System implements consume.Transport.
func (t *transport) System() string { return "redis" }

// Destination implements consume.Transport: the stream.
func (t *transport) Destination() string { return t.stream }

// HandlerTimeout is the default handler timeout: the min idle time.
func (t *transport) HandlerTimeout() time.Duration { return t.cfg.minIdle }

// Outage tells a Redis outage from another error, for the log level.
func (t *transport) Outage(err error) bool { return redisdown.Outage(context.Background(), err) }

// Receive makes the group if needed, then returns the entries of its own
// that are due again (handed back, left by an earlier run, or adopted
// from a consumer presumed dead), or else reads new ones (XREADGROUP),
// waiting up to WithBlock (less when something is due sooner). After due
// entries it reads new ones, so that retries do not hold up the stream.
func (t *transport) Receive(ctx context.Context) ([]consume.Message, error) {
	if t.keep == nil {
		t.keep = newKeeper(t)
	}
	if !t.groupReady {
		if err := t.createGroup(ctx); err != nil {
			return nil, err
		}
		t.groupReady = true
	}
	if !t.readNext {
		msgs, err := t.claimRound(ctx, time.Now())
		if err != nil || len(msgs) > 0 {
			t.readNext = len(msgs) > 0 // new entries next, however many are due
			return msgs, t.failed(err)
		}
	}
	t.readNext = false
	block := min(t.cfg.block, max(time.Until(t.wake()), time.Millisecond))
	if t.more {
		block = -1 // no BLOCK: there is more to claim
	}
	readAt := time.Now()
	read, err := t.read(ctx, block)
	if err != nil {
		return nil, t.failed(err)
	}
	msgs := make([]consume.Message, len(read))
	for i, m := range read {
		t.keep.hold(readAt, m.ID)
		msgs[i] = &message{t: t, id: m.ID, values: m.Values, deliveries: 1, counted: true}
	}
	return msgs, nil
}

// failed notes a missing group (deleted with its stream): it is made again,
// and what this consumer held in it is forgotten.
func (t *transport) failed(err error) error {
	if err != nil && isNoGroup(err) {
		t.groupReady = false
		t.forgetAll()
	}
	return err
}

// Close stops keeping the entries held: Run returned, and what it did not
// settle stays pending, retried when a consumer of this name runs again
// (after the retry delay) or adopted by another after the min idle time.
func (t *transport) Close(context.Context) error {
	if t.keep != nil {
		t.keep.close()
		t.keep = nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	clear(t.due)
	return nil
}

// createGroup makes the consumer group, and the stream if missing.
func (t *transport) createGroup(ctx context.Context) error {
	err := t.rdb.XGroupCreateMkStream(ctx, t.stream, t.group, t.cfg.startID).Err()
	var rerr redis.Error
	if errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "BUSYGROUP ") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("outboxredis: creating group %s of %s: %w", t.group, t.stream, err)
	}
	t.log.Info("outboxredis: consumer group created", "start_id", t.cfg.startID)
	return nil
}

// read takes new messages (XREADGROUP … >), waiting up to block for them
// (a negative block does not wait).
func (t *transport) read(ctx context.Context, block time.Duration) ([]redis.XMessage, error) {
	res, err := t.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: t.group, Consumer: t.name, Streams: []string{t.stream, ">"}, Count: t.cfg.count, Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) || (err != nil && ctx.Err() != nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("outboxredis: XREADGROUP %s: %w", t.stream, err)
	}
	var msgs []redis.XMessage
	for _, s := range res {
		msgs = append(msgs, s.Messages...)
	}
	return msgs, nil
}
