package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sync"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/relay"
)

// publisher builds the publisher --to names; close releases it.
func (f *relayFlags) publisher(log *slog.Logger) (pub relay.Publisher, close func(), err error) {
	switch f.to {
	case "":
		return nil, nil, usagef("--to is required: %s", destinations)
	case "stdout":
		return &stdoutPublisher{w: f.c.stdout, source: f.source}, func() {}, nil
	case "asynq":
		return f.asynqPublisher(log)
	case "stream":
		return f.streamPublisher(log)
	case "amqp":
		return f.amqpPublisher(log)
	case "nats":
		return f.natsPublisher(log)
	case "kafka":
		return f.kafkaPublisher(log)
	}
	return nil, nil, usagef("--to %q: want %s", f.to, destinations)
}

// destinations are the values of --to.
const destinations = "asynq, stream, amqp, nats, kafka or stdout"

func (f *relayFlags) asynqPublisher(log *slog.Logger) (relay.Publisher, func(), error) {
	u, err := f.redisAddr()
	if err != nil {
		return nil, nil, err
	}
	opt, err := asynq.ParseRedisURI(f.redisURL)
	if err != nil {
		return nil, nil, usagef("--redis %s: %s", maskDSN(f.redisURL), f.c.secrets.scrub(err.Error()))
	}
	client := asynq.NewClient(opt)
	queue := f.queue
	pub := outboxasynq.NewPublisher(client, outboxasynq.WithSource(f.source), outboxasynq.WithLogger(log),
		outboxasynq.WithQueue(func(e *outbox.Envelope) string {
			if e.Topic != "" {
				return e.Topic
			}
			return queue
		}))
	desc := fmt.Sprintf("asynq queue %s (or the event's Topic) on %s", queue, redisWhere(u))
	return describedAsynq{pub, desc}, func() { _ = client.Close() }, nil
}

func (f *relayFlags) streamPublisher(log *slog.Logger) (relay.Publisher, func(), error) {
	if _, err := f.redisAddr(); err != nil {
		return nil, nil, err
	}
	opt, err := redis.ParseURL(f.redisURL)
	if err != nil {
		return nil, nil, usagef("--redis %s: %s", maskDSN(f.redisURL), f.c.secrets.scrub(err.Error()))
	}
	rdb := redis.NewClient(opt)
	opts := []outboxredis.Option{outboxredis.WithSource(f.source), outboxredis.WithDefaultStream(f.stream), outboxredis.WithLogger(log)}
	if f.prefix != "" {
		opts = append(opts, outboxredis.WithStreamPrefix(f.prefix))
	}
	if f.maxLen > 0 {
		opts = append(opts, outboxredis.WithMaxLen(f.maxLen))
	}
	return outboxredis.NewStreamPublisher(rdb, opts...), func() { _ = rdb.Close() }, nil
}

// redisAddr checks --redis (or OUTBOX_REDIS) before a Redis library parses
// it, so that no parser's error echoes it, and registers its password.
func (f *relayFlags) redisAddr() (*url.URL, error) {
	if f.redisURL == "" {
		f.redisURL = f.c.getenv("OUTBOX_REDIS")
	}
	if f.redisURL == "" {
		return nil, usagef("--to %s needs --redis (or OUTBOX_REDIS)", f.to)
	}
	u, err := url.Parse(f.redisURL)
	if err != nil || u.Host == "" && u.Scheme != "unix" && u.Scheme != "redis-socket" {
		return nil, usagef("--redis %s: not a valid Redis URL%s: want redis://[:password@]host:6379/0", maskDSN(f.redisURL), urlProblem(err))
	}
	if pw, ok := u.User.Password(); ok {
		f.c.secrets.add(pw)
	}
	return u, nil
}

// redisWhere is a Redis URL's address and database, for descriptions.
func redisWhere(u *url.URL) string {
	db := u.Path
	if db == "" || db == "/" {
		db = "/0"
	}
	return u.Host + db
}

// describedAsynq is the asynq publisher described by the CLI, which knows
// the queue its WithQueue function picks.
type describedAsynq struct {
	*outboxasynq.Publisher
	desc string
}

// Describe implements relay.Describer.
func (d describedAsynq) Describe() string { return d.desc }

// stdoutPublisher writes each event as one line of CloudEvents JSON.
type stdoutPublisher struct {
	mu     sync.Mutex
	w      io.Writer
	source string
}

func (p *stdoutPublisher) Publish(_ context.Context, e *outbox.Envelope) error {
	if e.Source == "" {
		c := *e
		c.Source = p.source
		e = &c
	}
	b, err := json.Marshal(e)
	if err != nil {
		return outbox.Permanent(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

// Describe implements relay.Describer.
func (p *stdoutPublisher) Describe() string { return "stdout (CloudEvents JSON lines)" }
