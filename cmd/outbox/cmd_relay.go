package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/relay"
)

// relayFlags are the flags of relay and dispatch-once.
type relayFlags struct {
	*common
	to, redisURL, queue, stream, prefix, source string
	maxLen                                      int64
	batch, concurrency, maxAttempts             int
	lease, poll, retention                      time.Duration
	workerID, logLevel, logFormat               string
	noListen                                    bool
}

func newRelayFlags(c *cli, name, usage, help string) *relayFlags {
	f := &relayFlags{common: newFlags(c, name, usage, help)}
	fs := f.fs
	fs.StringVar(&f.to, "to", "", "where events go: `asynq`, stream (a Redis stream) or stdout (one CloudEvents JSON line each)")
	fs.StringVar(&f.redisURL, "redis", c.getenv("OUTBOX_REDIS"), "Redis `URL`, redis://[:password@]host:6379/0 (env OUTBOX_REDIS)")
	fs.StringVar(&f.queue, "queue", "default", "asynq queue of events without a Topic (an event's Topic names its queue)")
	fs.StringVar(&f.stream, "stream", outboxredis.DefaultStream, "Redis stream of events without a Topic (an event's Topic names its stream)")
	fs.StringVar(&f.prefix, "stream-prefix", "", "prefix of every stream name")
	fs.Int64Var(&f.maxLen, "maxlen", 0, "trim streams to about this many entries (0: no trimming)")
	fs.StringVar(&f.source, "source", outbox.DefaultSource, "CloudEvents source of the events")
	fs.IntVar(&f.batch, "batch-size", relay.DefaultBatchSize, "events per claim")
	fs.IntVar(&f.concurrency, "concurrency", relay.DefaultConcurrency, "deliveries at once")
	fs.IntVar(&f.maxAttempts, "max-attempts", relay.DefaultMaxAttempts, "attempts of events that set none")
	fs.DurationVar(&f.lease, "lease", relay.DefaultLease, "how long a claim holds its events")
	fs.DurationVar(&f.poll, "poll-interval", 0, "idle poll (default 500ms; 5s on PostgreSQL, woken by NOTIFY)")
	fs.DurationVar(&f.retention, "retention", relay.DefaultRetention, "delete published events older than this (0: keep them)")
	fs.StringVar(&f.workerID, "worker-id", "", "relay id in locked_by and heartbeats (default host-pid-random)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json (logs go to stderr)")
	fs.BoolVar(&f.noListen, "no-listen", false, "do not LISTEN for NOTIFY on PostgreSQL (behind PgBouncer): poll")
	return f
}

func (f *relayFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, usagef("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch f.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(f.c.stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(f.c.stderr, opts)), nil
	}
	return nil, usagef("--log-format %q: want text or json", f.logFormat)
}

// publisher builds the publisher --to names; close releases it.
func (f *relayFlags) publisher(log *slog.Logger) (pub relay.Publisher, close func(), err error) {
	switch f.to {
	case "":
		return nil, nil, usagef("--to is required: asynq, stream or stdout")
	case "stdout":
		return &stdoutPublisher{w: f.c.stdout, source: f.source}, func() {}, nil
	case "asynq":
		if f.redisURL == "" {
			return nil, nil, usagef("--to asynq needs --redis (or OUTBOX_REDIS)")
		}
		opt, err := asynq.ParseRedisURI(f.redisURL)
		if err != nil {
			return nil, nil, usagef("--redis %s: %v", redact(f.redisURL), err)
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
		return pub, func() { _ = client.Close() }, nil
	case "stream":
		if f.redisURL == "" {
			return nil, nil, usagef("--to stream needs --redis (or OUTBOX_REDIS)")
		}
		opt, err := redis.ParseURL(f.redisURL)
		if err != nil {
			return nil, nil, usagef("--redis %s: %v", redact(f.redisURL), err)
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
	return nil, nil, usagef("--to %q: want asynq, stream or stdout", f.to)
}

// newRelay parses the flags and builds the relay.
func (f *relayFlags) newRelay(ctx context.Context, args []string) (*relay.Relay, func(), error) {
	if err := f.parse(args); err != nil {
		return nil, nil, err
	}
	log, err := f.logger()
	if err != nil {
		return nil, nil, err
	}
	pub, closePub, err := f.publisher(log)
	if err != nil {
		return nil, nil, err
	}
	opts := []relay.Option{relay.WithLogger(log), relay.WithBatchSize(f.batch), relay.WithConcurrency(f.concurrency),
		relay.WithMaxAttempts(f.maxAttempts), relay.WithLease(f.lease), relay.WithRetention(f.retention),
		relay.WithListen(!f.noListen)}
	if f.poll > 0 {
		opts = append(opts, relay.WithPollInterval(f.poll))
	}
	if f.workerID != "" {
		opts = append(opts, relay.WithWorkerID(f.workerID))
	}
	db, err := f.open(ctx)
	if err != nil {
		closePub()
		return nil, nil, err
	}
	r, err := relay.New(db, pub, opts...)
	if err != nil {
		closePub()
		return nil, nil, usagef("%v", strings.TrimPrefix(err.Error(), "relay: invalid option: "))
	}
	return r, closePub, nil
}

func runRelay(ctx context.Context, c *cli, args []string) error {
	f := newRelayFlags(c, "relay", "relay --to asynq|stream|stdout [flags]",
		"Runs a relay until SIGINT or SIGTERM: it claims committed events and delivers\n"+
			"them to asynq or a Redis stream, retrying failures, and records a heartbeat.\n"+
			"On a signal it finishes the deliveries in hand, releases the rest and exits 0.")
	r, closePub, err := f.newRelay(ctx, args)
	if err != nil {
		return err
	}
	defer closePub()
	return r.Start(ctx)
}

func runDispatchOnce(ctx context.Context, c *cli, args []string) error {
	f := newRelayFlags(c, "dispatch-once", "dispatch-once --to asynq|stream|stdout [flags]",
		"Claims one batch of events, delivers it, records the outcomes and exits.")
	f.withJSON()
	r, closePub, err := f.newRelay(ctx, args)
	if err != nil {
		return err
	}
	defer closePub()
	res, err := r.RunOnce(ctx)
	if err != nil {
		return err
	}
	if f.json {
		return writeJSON(c, map[string]int{"claimed": res.Claimed, "published": res.Published, "failed": res.Failed,
			"dead": res.Dead, "released": res.Released, "lost": res.Lost})
	}
	fmt.Fprintf(c.stderr, "claimed %d, published %d, failed %d, dead %d, released %d, lost %d\n",
		res.Claimed, res.Published, res.Failed, res.Dead, res.Released, res.Lost)
	return nil
}

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
