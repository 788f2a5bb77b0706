package outboxnats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// Defaults of the consumer options.
const (
	// DefaultBatch is how many messages one fetch asks for (WithBatch).
	DefaultBatch = 10
	// DefaultFetchWait is how long one fetch waits for messages
	// (WithFetchWait).
	DefaultFetchWait = 2 * time.Second
	// DefaultAckWait is the durable consumer's AckWait, and the default
	// handler timeout (WithAckWait).
	DefaultAckWait = 30 * time.Second
)

// opTimeout bounds the JetStream requests the consumer makes for a
// message (a dead-letter publish) or for itself (creating the durable).
const opTimeout = 5 * time.Second

// consumerConfig holds the Consumer's own options.
type consumerConfig struct {
	filterSubject string
	batch         int
	fetchWait     time.Duration
	ackWait       time.Duration
	deadSubject   string
	configure     func(*jetstream.ConsumerConfig)
}

func consumerOption(name string, f func(c *consumerConfig) error) consume.Option {
	return consume.TransportOption("outboxnats."+name, f)
}

// WithFilterSubject makes the durable consumer take only the messages of
// the stream whose subject matches filter (wildcards allowed), such as
// "shop.orders" or "shop.>". The default is every message of the stream.
func WithFilterSubject(filter string) consume.Option {
	return consumerOption("WithFilterSubject", func(c *consumerConfig) error {
		if filter == "" {
			return errors.New("empty filter subject")
		}
		c.filterSubject = filter
		return nil
	})
}

// WithBatch sets how many messages one fetch asks for (default 10, 1 to
// 10000). While the consumer holds them (waiting behind others, or
// running) it marks each in progress every third of the ack wait, so that
// none is delivered to another consumer of the durable meanwhile, however
// long the batch takes.
func WithBatch(n int) consume.Option {
	return consumerOption("WithBatch", func(c *consumerConfig) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("batch %d is not between 1 and 10000", n)
		}
		c.batch = n
		return nil
	})
}

// WithFetchWait sets how long one fetch waits for messages (default 2s,
// 10ms to 1 minute). When Run's context ends, the consumer waits for its
// fetch to end (at most this long, and 5s) to hand back what it brought.
func WithFetchWait(d time.Duration) consume.Option {
	return consumerOption("WithFetchWait", func(c *consumerConfig) error {
		if d < 10*time.Millisecond || d > time.Minute {
			return fmt.Errorf("fetch wait %v is not between 10ms and 1m", d)
		}
		c.fetchWait = d
		return nil
	})
}

// WithAckWait sets the durable consumer's AckWait (default 30s, at least
// 1s): a message not acknowledged, nor marked in progress, this long after
// its delivery is delivered again, to this consumer or another of the same
// durable. It is also the default of consume.WithHandlerTimeout.
func WithAckWait(d time.Duration) consume.Option {
	return consumerOption("WithAckWait", func(c *consumerConfig) error {
		if d < time.Second {
			return fmt.Errorf("ack wait %v is shorter than 1s", d)
		}
		c.ackWait = d
		return nil
	})
}

// WithDeadLetterSubject publishes every dead message to subject before it
// is terminated: the same data and headers, plus HeaderDeadReason,
// HeaderDeadStream, HeaderDeadConsumer, HeaderDeadSubject,
// HeaderDeadSequence and HeaderDeadDeliveries, with Nats-Msg-Id "<event
// id>:dead:<durable>:<stream sequence>". The subject must be captured by
// a stream (another than the consumer's, or one its filter does not
// match), which NewDeadLetters reads. If that publish fails, the message
// is not terminated: it is delivered again later and goes dead again. The
// default is none: a dead message is only terminated.
func WithDeadLetterSubject(subject string) consume.Option {
	return consumerOption("WithDeadLetterSubject", func(c *consumerConfig) error {
		if err := checkSubject(subject); err != nil {
			return fmt.Errorf("dead-letter subject: %w", err)
		}
		c.deadSubject = subject
		return nil
	})
}

// WithConsumerConfig lets fn adjust the durable consumer's configuration
// before it is created or updated, for settings this package does not
// choose (DeliverPolicy, MaxAckPending, Replicas, Description, …). The
// consumer needs AckPolicy explicit and its Durable name; keep MaxDeliver
// at -1 (consume.WithMaxDeliveries is the consumer's bound).
func WithConsumerConfig(fn func(cfg *jetstream.ConsumerConfig)) consume.Option {
	return consumerOption("WithConsumerConfig", func(c *consumerConfig) error {
		if fn == nil {
			return errors.New("nil consumer config function")
		}
		c.configure = fn
		return nil
	})
}

// NewConsumer returns a consumer of the durable pull consumer named
// durable on stream, that passes each event to h with the policy of
// package consume: options are consume's (such as consume.WithConcurrency,
// consume.WithMaxDeliveries, consume.WithOnDead) and this package's
// WithFilterSubject, WithBatch, WithFetchWait, WithAckWait,
// WithDeadLetterSubject and WithConsumerConfig. Run creates the durable
// consumer, or updates its configuration. It returns an error wrapping
// consume.ErrInvalidOption, and no consumer, for a nil js, an invalid
// stream or durable name, or a bad option or handler.
func NewConsumer(js jetstream.JetStream, stream, durable string, h consume.Handler, opts ...consume.Option) (*consume.Consumer, error) {
	cfg := consumerConfig{batch: DefaultBatch, fetchWait: DefaultFetchWait, ackWait: DefaultAckWait}
	optErr := consume.ApplyTransportOptions(&cfg, opts)
	argErr := errors.Join(checkName("stream", stream), checkName("durable", durable))
	if js == nil {
		argErr = errors.Join(errors.New("nil JetStream"), argErr)
	}
	if argErr != nil {
		argErr = fmt.Errorf("%w: outboxnats: %w", consume.ErrInvalidOption, argErr)
	}
	s := consume.SettingsOf(opts...)
	t := &transport{js: js, stream: stream, durable: durable, cfg: cfg, retryDelay: s.RetryDelay,
		log: s.Logger.With(slog.String("stream", stream), slog.String("consumer", durable)), excused: map[uint64]int{}}
	c, err := consume.New(t, h, opts...)
	if err = errors.Join(optErr, argErr, err); err != nil {
		return nil, err
	}
	return c, nil
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

// transport is the consume.Transport of a durable pull consumer.
type transport struct {
	js         jetstream.JetStream
	stream     string
	durable    string
	cfg        consumerConfig
	retryDelay time.Duration
	log        *slog.Logger

	// Receive's and Close's:
	cons  jetstream.Consumer
	fetch *fetch
	keep  *keeper

	mu      sync.Mutex
	excused map[uint64]int // stream sequence → deliveries that do not count
}

// fetch is a fetch in progress: its messages, each kept in progress from
// its arrival, and its error once it ended (msgs closed).
type fetch struct {
	msgs chan jetstream.Msg
	err  error
}

func (t *transport) System() string      { return "nats" }
func (t *transport) Destination() string { return t.stream }

// HandlerTimeout is the ack wait: the default of consume.WithHandlerTimeout.
func (t *transport) HandlerTimeout() time.Duration { return t.cfg.ackWait }

// Outage tells a server down, or a durable consumer gone (created again),
// from other errors.
func (t *transport) Outage(err error) bool { return natsDown(err) || consumerGone(err) }

// Receive returns the messages the current fetch brought, waiting for the
// first until the fetch ends (WithFetchWait); it starts a fetch of
// WithBatch messages when none is in progress, after creating the durable
// consumer when needed. A message is kept in progress from its arrival
// until it is settled.
func (t *transport) Receive(ctx context.Context) ([]consume.Message, error) {
	if t.fetch == nil {
		if err := t.start(ctx); err != nil {
			return nil, err
		}
	}
	ms, closed := adapterkit.Collect(ctx, t.fetch.msgs, t.cfg.batch, 0)
	var msgs []consume.Message
	for _, m := range ms {
		if d := t.message(m); d != nil {
			msgs = append(msgs, d)
		}
	}
	if closed {
		return msgs, t.ended(len(ms))
	}
	return msgs, nil
}

// start creates the durable consumer if need be, and starts a fetch whose
// messages the keeper holds as they arrive.
func (t *transport) start(ctx context.Context) error {
	if t.cons == nil {
		cons, err := t.ensure(ctx)
		if err != nil {
			return err
		}
		t.cons = cons
	}
	b, err := t.cons.Fetch(t.cfg.batch, jetstream.FetchMaxWait(t.cfg.fetchWait))
	if err != nil {
		return t.failed(err)
	}
	if t.keep == nil {
		t.keep = keep(t.cfg.ackWait / 3)
	}
	f, k := &fetch{msgs: make(chan jetstream.Msg, t.cfg.batch)}, t.keep
	go func() {
		for m := range b.Messages() {
			k.add(m)
			f.msgs <- m
		}
		f.err = b.Error()
		close(f.msgs)
	}()
	t.fetch = f
	return nil
}

// ended forgets the fetch that ended, and returns its error unless
// messages came with it.
func (t *transport) ended(received int) error {
	err := t.fetch.err
	t.fetch = nil
	if err == nil || received > 0 {
		return nil
	}
	return t.failed(err)
}

// failed wraps a fetch's error, and forgets the durable consumer when it
// is gone, to create it again.
func (t *transport) failed(err error) error {
	if consumerGone(err) {
		t.cons = nil
	}
	return fmt.Errorf("outboxnats: fetching from %s/%s: %w", t.stream, t.durable, err)
}

// ensure creates the durable consumer, or updates its configuration.
func (t *transport) ensure(ctx context.Context) (jetstream.Consumer, error) {
	cfg := jetstream.ConsumerConfig{
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       t.cfg.ackWait,
		MaxDeliver:    -1,
		FilterSubject: t.cfg.filterSubject,
	}
	if t.cfg.configure != nil {
		t.cfg.configure(&cfg)
	}
	cfg.Durable, cfg.AckPolicy = t.durable, jetstream.AckExplicitPolicy
	cctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	cons, err := t.js.CreateOrUpdateConsumer(cctx, t.stream, cfg)
	if err != nil {
		return nil, fmt.Errorf("outboxnats: creating or updating consumer %s of stream %s: %w", t.durable, t.stream, err)
	}
	t.log.Info("outboxnats consumer ready", "filter_subject", cfg.FilterSubject, "ack_wait", cfg.AckWait, "batch", t.cfg.batch)
	return cons, nil
}

// Close waits for the fetch in progress to end (within ctx), hands back
// what it brought that Receive did not return, and stops keeping
// messages. A later Run fetches again.
func (t *transport) Close(ctx context.Context) error {
	if f := t.fetch; f != nil {
		t.fetch = nil
		left, over := drain(ctx, f)
		var delay time.Duration
		if !over { // a message handed back at once would come back into the open fetch
			delay = t.retryDelay
		}
		for _, m := range left {
			if d := t.message(m); d != nil {
				_ = d.Retry(ctx, delay, false)
			}
		}
	}
	if t.keep != nil {
		t.keep.close()
		t.keep = nil
	}
	return nil
}

// drain returns the messages f brings until it ends (over) or ctx does.
func drain(ctx context.Context, f *fetch) (left []jetstream.Msg, over bool) {
	for {
		select {
		case m, ok := <-f.msgs:
			if !ok {
				return left, true
			}
			left = append(left, m)
		case <-ctx.Done():
			return left, false
		}
	}
}

// consumerGone reports whether err says that the durable consumer or its
// stream no longer exists, so that it must be created again.
func consumerGone(err error) bool {
	return errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
		errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerDoesNotExist)
}
