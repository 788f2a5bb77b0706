package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/relay"
)

// relayFlags are the flags of relay and dispatch-once.
type relayFlags struct {
	*common
	walMode                                     bool
	walSlot, replicationDSN                     string
	to, redisURL, queue, stream, prefix, source string
	maxLen                                      int64
	amqpURL, exchange                           string
	natsURL, subject, subjectPrefix             string
	kafkaBrokers, topic, kafkaLayout            string
	batch, concurrency, maxAttempts             int
	lease                                       time.Duration
	workerID, logLevel, logFormat               string
	// Only the long-running relay takes these.
	poll, retention time.Duration
	noListen        bool
	singleActive    bool
	attemptLog      bool
	metricsAddr     string
}

// newRelayFlags returns the flags of dispatch-once, and with long those
// of relay too.
func newRelayFlags(c *cli, name, usage, help string, long bool) *relayFlags {
	f := &relayFlags{common: newFlags(c, name, usage, help)}
	fs := f.fs
	fs.StringVar(&f.to, "to", "", "where events go: `asynq`, stream (a Redis stream), amqp (RabbitMQ), nats (NATS JetStream), kafka or stdout (one CloudEvents JSON line each)")
	fs.StringVar(&f.redisURL, "redis", "", "Redis `URL`, redis://[:password@]host:6379/0 (default $OUTBOX_REDIS)")
	fs.StringVar(&f.queue, "queue", "default", "asynq queue of events without a Topic (an event's Topic names its queue)")
	fs.StringVar(&f.stream, "stream", outboxredis.DefaultStream, "Redis stream of events without a Topic (an event's Topic names its stream)")
	fs.StringVar(&f.prefix, "stream-prefix", "", "prefix of every stream name")
	fs.Int64Var(&f.maxLen, "maxlen", 0, "trim streams to about this many entries (0: no trimming)")
	fs.StringVar(&f.amqpURL, "amqp-url", "", "RabbitMQ `URL`, amqp://user:password@host:5672/vhost (default $OUTBOX_AMQP)")
	fs.StringVar(&f.exchange, "exchange", "", "RabbitMQ `exchange`, routing key the event's Topic (or Type); default the default exchange: the Topic names the queue")
	fs.StringVar(&f.natsURL, "nats-url", "", "NATS server `URLs`, nats://[user:password@]host:4222[,…] (default $OUTBOX_NATS)")
	fs.StringVar(&f.subject, "subject", outboxnats.DefaultSubject, "NATS subject of events without a Topic (an event's Topic names its subject)")
	fs.StringVar(&f.subjectPrefix, "subject-prefix", "", "prefix of every NATS subject, e.g. shop.")
	fs.StringVar(&f.kafkaBrokers, "kafka-brokers", "", "Kafka seed `brokers`, host:port[,host:port…] (default $OUTBOX_KAFKA)")
	fs.StringVar(&f.topic, "topic", "", "Kafka `topic` of events without a Topic (default none: such an event is dead, with the reason)")
	fs.StringVar(&f.kafkaLayout, "kafka-layout", "structured", "Kafka records: structured (CloudEvents JSON value), binary (payload value, ce_ headers) or debezium (Debezium's outbox event router)")
	fs.StringVar(&f.source, "source", outbox.DefaultSource, "CloudEvents source of the events")
	fs.IntVar(&f.batch, "batch-size", relay.DefaultBatchSize, "events per claim")
	fs.IntVar(&f.concurrency, "concurrency", relay.DefaultConcurrency, "deliveries at once")
	fs.IntVar(&f.maxAttempts, "max-attempts", relay.DefaultMaxAttempts, "attempts of events that set none")
	fs.DurationVar(&f.lease, "lease", relay.DefaultLease, "how long a claim holds its events")
	fs.StringVar(&f.workerID, "worker-id", "", "relay id in locked_by and heartbeats (default host-pid-random)")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text or json (logs go to stderr)")
	fs.BoolVar(&f.attemptLog, "attempt-log", false, "log every claim's outcome in the table's attempt log (see outbox show)")
	if long {
		fs.DurationVar(&f.poll, "poll-interval", 0, "idle poll (default 500ms; 5s on PostgreSQL, woken by NOTIFY)")
		fs.DurationVar(&f.retention, "retention", relay.DefaultRetention, "delete published events older than this (0: keep them)")
		fs.BoolVar(&f.noListen, "no-listen", false, "do not LISTEN for NOTIFY on PostgreSQL (behind PgBouncer): poll")
		fs.BoolVar(&f.singleActive, "single-active", false, "one active relay per table: take its advisory lock, or stand by and take over when the holder dies")
		fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`ADDR`/metrics (e.g. :9090)")
		fs.BoolVar(&f.walMode, "wal", false, "WAL mode (PostgreSQL): also stream the table's replication slot (see 'outbox migrate --wal'); one relay streams, the others stand by")
		fs.StringVar(&f.walSlot, "wal-slot", "", "WAL mode's replication `slot` (default: the table's name followed by _wal)")
		fs.StringVar(&f.replicationDSN, "replication-dsn", "", "WAL mode: the `DSN` of the replication connection, when --db goes through a pooler (default: --db)")
	}
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

// newRelay parses the flags and builds the relay; close releases what it
// holds.
func (f *relayFlags) newRelay(ctx context.Context, args []string) (_ *relay.Relay, _ func(), err error) {
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
	closers := []func(){closePub}
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	defer func() {
		if err != nil {
			closeAll()
		}
	}()
	opts := f.relayOptions(log)
	db, err := f.open(ctx)
	if err != nil {
		return nil, nil, err
	}
	if f.metricsAddr != "" {
		opt, stop, err := serveMetrics(f.metricsAddr, log)
		if err != nil {
			return nil, nil, err
		}
		opts = append(opts, opt)
		closers = append(closers, stop)
	}
	r, err := relay.New(db, pub, opts...)
	if err != nil {
		return nil, nil, usagef("%v", strings.TrimPrefix(err.Error(), "relay: invalid option: "))
	}
	return r, closeAll, nil
}

// relayOptions are the relay's options that the flags set (the metrics'
// comes with its server); with --wal it also sets f.wal, so that the
// database opens in WAL mode's drain.
func (f *relayFlags) relayOptions(log *slog.Logger) []relay.Option {
	opts := []relay.Option{relay.WithLogger(log), relay.WithBatchSize(f.batch), relay.WithConcurrency(f.concurrency),
		relay.WithMaxAttempts(f.maxAttempts), relay.WithLease(f.lease), relay.WithRetention(f.retention),
		relay.WithListen(!f.noListen)}
	if f.poll > 0 {
		opts = append(opts, relay.WithPollInterval(f.poll))
	}
	if f.workerID != "" {
		opts = append(opts, relay.WithWorkerID(f.workerID))
	}
	if f.singleActive {
		opts = append(opts, relay.WithSingleActive())
	}
	if f.attemptLog {
		opts = append(opts, relay.WithAttemptLog())
	}
	if f.walMode {
		// Drain: the relay writes no event; it streams the slot whatever
		// mode the writers are in.
		f.wal = &outbox.WAL{Slot: f.walSlot, Drain: true}
		if f.replicationDSN != "" {
			opts = append(opts, relay.WithReplicationDSN(f.replicationDSN))
		}
	}
	return opts
}

func runRelay(ctx context.Context, c *cli, args []string) error {
	f := newRelayFlags(c, "relay", "relay --to asynq|stream|amqp|nats|kafka|stdout [flags]",
		"Runs a relay until SIGINT or SIGTERM: it claims committed events and delivers\n"+
			"them to asynq, a Redis stream, RabbitMQ, NATS JetStream or Kafka, retrying\n"+
			"failures, and records a heartbeat (its publisher and counts, shown by\n"+
			"'outbox stats').\n"+
			"On a signal it finishes the deliveries in hand, releases the rest and exits 0.\n"+
			"With --metrics-addr it serves its metrics in the Prometheus text format at\n"+
			"/metrics.", true)
	r, closeAll, err := f.newRelay(ctx, args)
	if err != nil {
		return err
	}
	defer closeAll()
	return r.Start(ctx)
}

func runDispatchOnce(ctx context.Context, c *cli, args []string) error {
	f := newRelayFlags(c, "dispatch-once", "dispatch-once --to asynq|stream|amqp|nats|kafka|stdout [flags]",
		"Claims one batch of events, delivers it, records the outcomes and exits.", false)
	f.withJSON()
	r, closeAll, err := f.newRelay(ctx, args)
	if err != nil {
		return err
	}
	defer closeAll()
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
