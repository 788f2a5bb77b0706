package outboxamqp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// DefaultPrefetch is the consumer's prefetch (WithPrefetch) unless
// consume.WithConcurrency asks for more.
const DefaultPrefetch = 20

// pollTime bounds how long Receive waits for a first delivery.
const pollTime = time.Second

// consumerConfig holds the Consumer's own options.
type consumerConfig struct {
	prefetch int
	tag      string
	dial     DialFunc
	topology func(ch *amqp.Channel) error
}

func consumerOption(name string, f func(c *consumerConfig) error) consume.Option {
	return consume.TransportOption("outboxamqp."+name, f)
}

// WithPrefetch sets how many unacknowledged messages the broker sends the
// consumer ahead (basic.qos prefetch count, 1 to 65535; default
// DefaultPrefetch, or consume.WithConcurrency when that is more). It is
// also the most messages one batch holds. Messages waiting out their retry
// delay stay unacknowledged, and so take up the prefetch meanwhile.
func WithPrefetch(n int) consume.Option {
	return consumerOption("WithPrefetch", func(c *consumerConfig) error {
		if n < 1 || n > 65535 {
			return fmt.Errorf("prefetch %d is not between 1 and 65535", n)
		}
		c.prefetch = n
		return nil
	})
}

// WithConsumerTag sets the consumer tag (default: one the broker makes).
// It must be unique on its channel and at most 255 bytes.
func WithConsumerTag(tag string) consume.Option {
	return consumerOption("WithConsumerTag", func(c *consumerConfig) error {
		if len(tag) > maxShortStr {
			return fmt.Errorf("consumer tag is longer than %d bytes", maxShortStr)
		}
		c.tag = tag
		return nil
	})
}

// WithConsumerDial gives the Consumer a function that opens a new
// connection when the current one is closed (a network failure, a broker
// restart): it dials before it consumes again. The connections it dialled
// are closed when Run returns; with it, NewConsumer's conn may be nil.
// See Dialer; WithDial is the Publisher's.
func WithConsumerDial(dial DialFunc) consume.Option {
	return consumerOption("WithConsumerDial", func(c *consumerConfig) error {
		if dial == nil {
			return errors.New("dial function is nil")
		}
		c.dial = dial
		return nil
	})
}

// WithConsumerTopology declares what the Consumer needs (its queue, its
// bindings, its dead-letter exchange and queue) each time it starts
// consuming, on a channel of its own. f must be idempotent; an error ends
// that attempt, which Run makes again after a backoff. WithTopology is the
// Publisher's.
func WithConsumerTopology(f func(ch *amqp.Channel) error) consume.Option {
	return consumerOption("WithConsumerTopology", func(c *consumerConfig) error {
		if f == nil {
			return errors.New("topology function is nil")
		}
		c.topology = f
		return nil
	})
}

// NewConsumer returns a consumer of queue that passes each event to h,
// with the policy of package consume: options are consume's (such as
// consume.WithConcurrency, consume.WithMaxDeliveries, consume.WithOnDead)
// and this package's WithPrefetch, WithConsumerTag, WithConsumerDial and
// WithConsumerTopology. conn may be nil with WithConsumerDial. It returns
// an error wrapping consume.ErrInvalidOption for a bad argument or
// option; it does not talk to the broker (Run does).
func NewConsumer(conn *amqp.Connection, queue string, h consume.Handler, opts ...consume.Option) (*consume.Consumer, error) {
	var cfg consumerConfig
	optErr := consume.ApplyTransportOptions(&cfg, opts)
	var argErr error
	if conn == nil && cfg.dial == nil {
		argErr = fmt.Errorf("%w: outboxamqp: connection is nil and no DialFunc (WithConsumerDial) is given", consume.ErrInvalidOption)
	}
	if queue == "" || len(queue) > maxShortStr {
		argErr = errors.Join(argErr, fmt.Errorf("%w: outboxamqp: queue name %q is empty or longer than %d bytes", consume.ErrInvalidOption, queue, maxShortStr))
	}
	s := consume.SettingsOf(opts...)
	if cfg.prefetch == 0 {
		cfg.prefetch = max(DefaultPrefetch, s.Concurrency)
	}
	log := s.Logger.With(slog.String("queue", queue))
	t := &transport{src: &connSource{conn: conn, dial: cfg.dial, log: log}, queue: queue, cfg: cfg, log: log,
		failures: failureCounts{m: map[string]int{}}, timers: map[*time.Timer]struct{}{}}
	c, err := consume.New(t, h, opts...)
	if err := errors.Join(optErr, argErr, err); err != nil {
		return nil, err
	}
	return c, nil
}

// transport is the consume.Transport of a queue: a consuming channel
// (a session), opened again after it closed.
type transport struct {
	src      *connSource
	queue    string
	cfg      consumerConfig
	log      *slog.Logger
	sess     *session // Receive's and Close's
	failures failureCounts

	mu     sync.Mutex
	timers map[*time.Timer]struct{} // requeues waiting out their delay
}

// session is a channel consuming the queue.
type session struct {
	ch         *amqp.Channel
	deliveries <-chan amqp.Delivery
	closes     chan *amqp.Error
}

func (t *transport) System() string      { return "rabbitmq" }
func (t *transport) Destination() string { return t.queue }

// Outage tells a connection lost from a refusal (such as a missing queue).
func (t *transport) Outage(err error) bool { return amqpDown(err) }

// Receive returns the deliveries buffered on the consuming channel, up to
// the prefetch, waiting up to a second for the first. It opens a session
// first when there is none, dialling when the connection is closed; when
// the session ended, it returns why, and the next call opens another.
func (t *transport) Receive(ctx context.Context) ([]consume.Message, error) {
	if t.sess == nil {
		s, err := t.open(ctx)
		if err != nil {
			return nil, err
		}
		t.sess = s
	}
	ds, closed := adapterkit.Collect(ctx, t.sess.deliveries, t.cfg.prefetch, pollTime)
	if closed { // what was received goes back to the queue with the channel
		return nil, t.end()
	}
	msgs := make([]consume.Message, len(ds))
	for i, d := range ds {
		msgs[i] = &delivery{t: t, d: d}
	}
	return msgs, nil
}

// open declares the topology, opens a channel, sets its prefetch and
// starts consuming.
func (t *transport) open(ctx context.Context) (*session, error) {
	conn, err := t.src.get(ctx)
	if err != nil {
		return nil, err
	}
	if t.cfg.topology != nil {
		if err := runTopology(ctx, conn, t.cfg.topology); err != nil {
			return nil, err
		}
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%w: opening a channel: %w", ErrConnectionClosed, err)
	}
	s := &session{ch: ch, closes: ch.NotifyClose(make(chan *amqp.Error, 1))}
	if err := ch.Qos(t.cfg.prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("outboxamqp: setting prefetch %d: %w", t.cfg.prefetch, err)
	}
	if s.deliveries, err = ch.Consume(t.queue, t.cfg.tag, false, false, false, false, nil); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("outboxamqp: consuming from queue %q: %w", t.queue, err)
	}
	t.log.Debug("outboxamqp consumer: consuming", "addr", remoteAddr(conn), "prefetch", t.cfg.prefetch)
	return s, nil
}

// end closes the session whose deliveries ended, and returns why: the
// channel closed, or the broker cancelled the consumer (its queue was
// deleted).
func (t *transport) end() error {
	s := t.sess
	t.sess = nil
	if !s.ch.IsClosed() {
		_ = s.ch.Close()
		return fmt.Errorf("outboxamqp: the broker cancelled consuming from queue %q (was it deleted?)", t.queue)
	}
	select {
	case e := <-s.closes:
		if e != nil {
			return fmt.Errorf("%w: %w", ErrConnectionClosed, e)
		}
	case <-time.After(time.Second):
	}
	return fmt.Errorf("%w: the channel closed", ErrConnectionClosed)
}

// Close stops the requeues waiting out their delay and closes the session
// (the broker requeues what was not settled) and the connections dialled.
// A later Run opens another session.
func (t *transport) Close(context.Context) error {
	t.mu.Lock()
	for tm := range t.timers {
		tm.Stop()
	}
	clear(t.timers)
	t.mu.Unlock()
	var err error
	if t.sess != nil {
		err = t.sess.ch.Close()
		t.sess = nil
	}
	t.src.release()
	if errors.Is(err, amqp.ErrClosed) {
		err = nil
	}
	return err
}

// later runs fn after d, unless Close comes first.
func (t *transport) later(d time.Duration, fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var tm *time.Timer
	tm = time.AfterFunc(d, func() {
		t.mu.Lock()
		_, pending := t.timers[tm]
		delete(t.timers, tm)
		t.mu.Unlock()
		if pending {
			fn()
		}
	})
	t.timers[tm] = struct{}{}
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
