package outboxamqp

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/optionerr"
	"github.com/gormoutbox/outbox/relay"
)

// maxIdleChannels bounds the confirm-mode channels a Publisher keeps open
// between batches.
const maxIdleChannels = 16

// Publisher publishes outbox events to RabbitMQ (or any AMQP 0-9-1
// broker), one persistent message per event, with publisher confirms. It
// implements relay.Publisher, relay.BatchPublisher, relay.Validator and
// relay.Describer, and is safe for concurrent use: each batch is published
// on a confirm-mode channel of its own, taken from a small pool.
//
// Each message
//
//   - goes to the exchange and routing key of Route (default: the default
//     exchange, that is the queue named by the event's Topic),
//   - is published mandatory, so that the broker returns it if no queue
//     takes it (ErrUnroutable),
//   - is persistent (delivery mode 2), with the event id as its message-id,
//     the event type as its type, the envelope's source as its app-id, the
//     event's creation time as its timestamp,
//   - has the content type ContentType, its body being the envelope's
//     CloudEvents 1.0 JSON,
//   - and carries the event's headers (traceparent, tracestate, …) and
//     the Header… constants.
//
// See the package documentation for its errors and for reconnection.
type Publisher struct {
	src     *connSource
	cfg     publisherConfig
	log     *slog.Logger
	invalid error

	mu       sync.Mutex
	idle     []*confirmChannel
	declared *amqp.Connection // the connection WithTopology last ran on
}

var (
	_ relay.BatchPublisher = (*Publisher)(nil)
	_ relay.Validator      = (*Publisher)(nil)
	_ relay.Describer      = (*Publisher)(nil)
)

// NewPublisher returns a Publisher that publishes over conn. conn may be
// nil when WithDial is given: the first publish dials. It returns an error
// wrapping ErrInvalidOption for a bad option or a nil conn without
// WithDial; it does not talk to the broker.
func NewPublisher(conn *amqp.Connection, opts ...Option) (*Publisher, error) {
	cfg := publisherConfig{PublisherConfig: adapterkit.NewPublisherConfig(ErrInvalidOption), confirmTimeout: DefaultConfirmTimeout}
	optionerr.Apply(&cfg, &cfg.Errors, opts)
	if conn == nil && cfg.dial == nil {
		cfg.Fail("connection is nil and no DialFunc (WithDial) is given")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	p := &Publisher{
		src:     &connSource{conn: conn, dial: cfg.dial, log: log},
		cfg:     cfg,
		log:     log,
		invalid: cfg.Err(),
	}
	return p, p.invalid
}

// Validate reports the configuration errors (joined), each wrapping
// ErrInvalidOption, or nil. relay.New calls it.
func (p *Publisher) Validate() error { return p.invalid }

// Publish publishes e and waits for the broker's confirm. Its error is
// classified as PublishBatch's.
func (p *Publisher) Publish(ctx context.Context, e *outbox.Envelope) error {
	return p.PublishBatch(ctx, []*outbox.Envelope{e})[0]
}

// PublishBatch publishes es on one confirm-mode channel, then waits for
// the broker to confirm them all, and returns one result per event, in
// order:
//
//   - nil: the broker confirmed (basic.ack) the message and did not return
//     it: it is in every queue its exchange routed it to.
//   - ErrUnroutable (ordinary error): the broker returned the message, no
//     queue being bound for its routing key.
//   - ErrRefused (ordinary): its publish made the broker close the channel
//     (no such exchange, access refused).
//   - outbox.Unavailable wrapping ErrNacked, ErrConfirmTimeout or
//     ErrConnectionClosed: the broker nacked it, did not confirm it in
//     time, or the connection or channel closed (or could not be opened
//     or dialled) first. The relay then spends no attempt.
//   - outbox.Permanent wrapping ErrInvalidMessage: the event cannot become
//     an AMQP message.
//
// An unconfirmed message may still have reached the broker: the relay
// publishes it again, and consumers deduplicate by event id (Idempotent).
func (p *Publisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := make([]error, len(es))
	if p.invalid != nil {
		for i := range errs {
			errs[i] = p.invalid
		}
		return errs
	}
	items := make([]*item, 0, len(es))
	for i, e := range es {
		it, err := p.message(i, e)
		if err != nil {
			errs[i] = err
			continue
		}
		items = append(items, it)
	}
	p.publish(ctx, items, errs)
	return errs
}

// publish publishes items in rounds, each on a confirm channel, until
// every one has its result in errs. A round that makes the broker close
// its channel (a channel exception caused by one message) settles the
// messages it can blame and leaves the others for the next round; when
// it cannot tell which message was at fault, the rest go one per round.
func (p *Publisher) publish(ctx context.Context, items []*item, errs []error) {
	alone := false
	for rounds := 0; len(items) > 0; rounds++ {
		if rounds > len(errs)+1 { // cannot happen: each round settles one or goes alone
			settleAll(items, errs, outbox.Unavailable(fmt.Errorf("%w: no progress publishing the batch", ErrConnectionClosed)))
			return
		}
		group := items
		if alone {
			group = items[:1]
		}
		cc, err := p.channel(ctx)
		if err != nil {
			settleAll(items, errs, err)
			return
		}
		r := cc.round(ctx, group, p.cfg.confirmTimeout, errs)
		p.release(cc, r.reusable)
		if r.down != nil { // the connection is down: nothing else will go
			settleAll(append(r.retry, items[len(group):]...), errs, r.down)
			return
		}
		items = append(r.retry, items[len(group):]...)
		alone = alone || r.alone
	}
}

func settleAll(items []*item, errs []error, err error) {
	for _, it := range items {
		errs[it.idx] = err
	}
}

// channel returns an open confirm-mode channel: an idle one, or a new one
// on the current connection (dialled if need be, its topology declared).
func (p *Publisher) channel(ctx context.Context) (*confirmChannel, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		cc := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if !cc.ch.IsClosed() && !cc.conn.IsClosed() {
			p.mu.Unlock()
			return cc, nil
		}
	}
	p.mu.Unlock()
	conn, err := p.src.get(ctx)
	if err != nil {
		return nil, err
	}
	if err := p.declare(ctx, conn); err != nil {
		return nil, err
	}
	return openConfirmChannel(ctx, conn)
}

// declare runs WithTopology once per connection.
func (p *Publisher) declare(ctx context.Context, conn *amqp.Connection) error {
	if p.cfg.topology == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.declared == conn {
		return nil
	}
	if err := runTopology(ctx, conn, p.cfg.topology); err != nil {
		p.log.Error("outboxamqp: declaring the topology failed; events wait", "error", err)
		return outbox.Unavailable(err)
	}
	p.declared = conn
	return nil
}

// runTopology runs f on a channel of its own, giving up when ctx ends.
func runTopology(ctx context.Context, conn *amqp.Connection, f func(*amqp.Channel) error) error {
	_, err := withContext(ctx, func() (struct{}, error) {
		ch, err := conn.Channel()
		if err != nil {
			return struct{}{}, fmt.Errorf("%w: opening a channel to declare the topology: %w", ErrConnectionClosed, err)
		}
		defer func() { _ = ch.Close() }()
		if err := f(ch); err != nil {
			return struct{}{}, fmt.Errorf("outboxamqp: declaring the topology: %w", err)
		}
		return struct{}{}, nil
	}, func(struct{}) {})
	return err
}

// release puts cc back in the pool if reusable, and closes it otherwise.
func (p *Publisher) release(cc *confirmChannel, reusable bool) {
	if reusable && !cc.ch.IsClosed() {
		p.mu.Lock()
		if len(p.idle) < maxIdleChannels && !p.src.isClosed() {
			p.idle = append(p.idle, cc)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	// Closing waits for the broker's close-ok: not on the relay's time.
	go func() { _ = cc.ch.Close() }()
}

// Close closes the Publisher's channels and the connections it dialled
// (WithDial); a connection given to NewPublisher stays open. Publishing
// after Close fails with ErrClosed.
func (p *Publisher) Close() error {
	err := p.src.close()
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, cc := range idle {
		_ = cc.ch.Close()
	}
	return err
}

// Describe says where the Publisher publishes, for relay heartbeats and
// "outbox stats" (it implements relay.Describer).
func (p *Publisher) Describe() string {
	d := p.describeRoute()
	if a := p.src.addr(); a != "" {
		d += " on " + a
	}
	return d
}
