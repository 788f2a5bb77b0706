package outboxredis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/adapterkit"
	"github.com/gormoutbox/outbox/internal/adapterkit/redisdown"
	"github.com/gormoutbox/outbox/internal/optionerr"
	"github.com/gormoutbox/outbox/relay"
)

// StreamPublisher appends outbox events to Redis Streams, one entry per
// event. It implements relay.Publisher, relay.BatchPublisher (one pipeline
// per batch) and relay.Validator. It is safe for concurrent use.
type StreamPublisher struct {
	rdb  redis.UniversalClient
	cfg  pubConfig
	log  *slog.Logger
	idmp idmpProbe
}

var (
	_ relay.BatchPublisher = (*StreamPublisher)(nil)
	_ relay.Validator      = (*StreamPublisher)(nil)
)

// NewStreamPublisher returns a publisher that appends each event to a
// stream of rdb: the event's Topic, or what WithStreamFunc chooses, or the
// default stream, after the prefix of WithStreamPrefix. A bad option is
// reported by Validate, which relay.New calls.
func NewStreamPublisher(rdb redis.UniversalClient, opts ...Option) *StreamPublisher {
	cfg := pubConfig{PublisherConfig: adapterkit.NewPublisherConfig(ErrInvalidOption), defaultStream: DefaultStream}
	optionerr.Apply(&cfg, &cfg.Errors, opts)
	if rdb == nil {
		cfg.Fail("nil redis client")
	} else if cfg.waitReplicas > 0 {
		if err := checkWaitClient(rdb); err != nil {
			cfg.Fail("%v", err)
		}
	}
	return &StreamPublisher{rdb: rdb, cfg: cfg, log: cfg.Logger}
}

// Validate reports the first configuration errors (joined), each wrapping
// ErrInvalidOption, or nil.
func (p *StreamPublisher) Validate() error { return p.cfg.Err() }

// Stream returns the stream that e is appended to.
func (p *StreamPublisher) Stream(e *outbox.Envelope) string {
	name := e.Topic
	if p.cfg.streamFunc != nil {
		name = p.cfg.streamFunc(e)
	}
	if name == "" {
		name = p.cfg.defaultStream
	}
	return p.cfg.prefix + name
}

// Publish appends e to its stream. It returns outbox.Unavailable(err) when
// Redis is down, by the rule of relay.Publisher (the relay then spends no
// attempt),
// outbox.Permanent(err) when e cannot be encoded, and the error otherwise.
func (p *StreamPublisher) Publish(ctx context.Context, e *outbox.Envelope) error {
	if p.cfg.waitReplicas > 0 {
		return p.publishReplicated(ctx, []*outbox.Envelope{e})[0]
	}
	args, err := p.args(e, p.useIDMP(ctx))
	if err != nil {
		return err
	}
	var cmd redis.Cmder
	if p.chained(e) {
		cmd = p.appendChained(ctx, p.rdb, e, args)
	} else {
		cmd = p.rdb.XAdd(ctx, args)
	}
	if err := cmd.Err(); err != nil {
		return failed(ctx, e.ID, args.Stream, err)
	}
	return nil
}

// failed names the event and stream in err, an error of XADD under ctx,
// and marks it outbox.Unavailable when Redis is down (the rule of
// relay.Publisher), classified on err itself, before the names are added.
func failed(ctx context.Context, id, stream string, err error) error {
	wrapped := fmt.Errorf("outboxredis: XADD event %s to %s: %w", id, stream, err)
	if redisdown.Outage(ctx, err) {
		return outbox.Unavailable(wrapped)
	}
	return wrapped
}

// PublishBatch appends the events in one pipeline (not a transaction) and
// returns one result per event, in order, read from each XADD's own reply:
// an entry can fail while the others are appended. Errors are classified
// as in Publish. WithWaitReplicas makes it one pipeline per master, each
// ending in WAIT.
func (p *StreamPublisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	if p.cfg.waitReplicas > 0 {
		return p.publishReplicated(ctx, es)
	}
	errs := make([]error, len(es))
	cmds := make([]redis.Cmder, len(es))
	streams := make([]string, len(es))
	idmp := p.useIDMP(ctx)
	pipe := p.rdb.Pipeline()
	queued := 0
	for i, e := range es {
		args, err := p.args(e, idmp)
		if err != nil {
			errs[i] = err
			continue
		}
		streams[i] = args.Stream
		if p.chained(e) {
			cmds[i] = p.appendChained(ctx, pipe, e, args)
		} else {
			cmds[i] = pipe.XAdd(ctx, args)
		}
		queued++
	}
	if queued == 0 {
		return errs
	}
	// Exec's error is the first command's error; each command carries its own.
	_, _ = pipe.Exec(ctx)
	for i, cmd := range cmds {
		if cmd == nil {
			continue
		}
		if err := cmd.Err(); err != nil {
			errs[i] = failed(ctx, es[i].ID, streams[i], err)
		}
	}
	return errs
}

// args builds the XADD of e.
func (p *StreamPublisher) args(e *outbox.Envelope, idmp bool) (*redis.XAddArgs, error) {
	if e == nil {
		return nil, outbox.Permanent(errors.New("outboxredis: nil envelope"))
	}
	env := *e
	if env.Source == "" {
		env.Source = p.cfg.Source
	}
	body, err := env.MarshalJSON()
	if err != nil {
		return nil, outbox.Permanent(fmt.Errorf("outboxredis: encoding event %s: %w", e.ID, err))
	}
	a := &redis.XAddArgs{
		Stream: p.Stream(e),
		Values: []any{FieldEvent, body, FieldID, e.ID, FieldType, e.Type},
	}
	if p.cfg.maxLen > 0 {
		a.MaxLen, a.Approx = p.cfg.maxLen, true
	}
	if idmp && e.ID != "" && !p.chained(e) {
		a.ProducerID, a.IdempotentID = p.cfg.producerID, e.ID
	}
	return a, nil
}

// Describe says where the publisher appends, for relay heartbeats and
// "outbox stats" (it implements relay.Describer): the default stream, or
// WithStreamFunc, and the Redis address of a *redis.Client.
func (p *StreamPublisher) Describe() string {
	d := "redis stream " + p.cfg.prefix + p.cfg.defaultStream + " (or the event's Topic)"
	if p.cfg.prefix != "" {
		d = "redis stream " + p.cfg.prefix + p.cfg.defaultStream + " (or " + p.cfg.prefix + "<Topic>)"
	}
	if p.cfg.streamFunc != nil {
		d = "redis stream " + p.cfg.prefix + "<chosen by WithStreamFunc>"
	}
	if c, ok := p.rdb.(*redis.Client); ok {
		d += fmt.Sprintf(" on %s db %d", c.Options().Addr, c.Options().DB)
	}
	return d
}
