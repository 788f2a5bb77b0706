package relay

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/optionerr"
)

// ErrInvalidOption is wrapped by every configuration error of New.
var ErrInvalidOption = errors.New("relay: invalid option")

// Defaults of the options.
const (
	// DefaultBatchSize is the size of a claim when the table has few
	// events to deliver; while a backlog lasts the relay doubles it, up
	// to DefaultMaxBatchSize (see WithBatchSize).
	DefaultBatchSize    = 100
	DefaultMaxBatchSize = 1000
	DefaultLease        = 30 * time.Second
	DefaultConcurrency  = 10
	DefaultMaxAttempts  = 25
	DefaultRetention    = 24 * time.Hour
	// DefaultPollInterval is the idle poll of MySQL and SQLite; PostgreSQL,
	// woken by LISTEN/NOTIFY, polls every DefaultListenPollInterval.
	DefaultPollInterval       = 500 * time.Millisecond
	DefaultListenPollInterval = 5 * time.Second
	// DefaultHeartbeat is how often a running relay records itself.
	DefaultHeartbeat = 10 * time.Second
)

// Option configures a Relay.
type Option func(*config)

type config struct {
	batchSize    int // the claim's size when the backlog is short
	maxBatchSize int // the most it grows to while a backlog lasts
	syncCommit   bool
	pollInterval time.Duration
	lease        time.Duration
	concurrency  int
	maxAttempts  int
	backoff      func(attempt int) time.Duration
	workerID     string
	logger       *slog.Logger
	onDead       func(ctx context.Context, e *outbox.Envelope, reason error)
	retention    time.Duration
	listen       bool
	heartbeat    time.Duration
	singleActive bool
	attemptLog   bool
	registry     *outbox.Registry
	meter        metric.MeterProvider
	tracer       trace.TracerProvider
	// WAL mode (wal_options.go).
	replicationDSN string
	walWarnLag     int64
	walWarnAge     time.Duration
	walSpillAfter  time.Duration
	optionerr.Errors
}

func defaultConfig() config {
	return config{
		batchSize:     DefaultBatchSize,
		maxBatchSize:  DefaultMaxBatchSize,
		lease:         DefaultLease,
		concurrency:   DefaultConcurrency,
		maxAttempts:   DefaultMaxAttempts,
		backoff:       DefaultBackoff,
		retention:     DefaultRetention,
		listen:        true,
		heartbeat:     DefaultHeartbeat,
		walWarnLag:    DefaultWALWarnLag,
		walWarnAge:    DefaultWALWarnAge,
		walSpillAfter: DefaultWALSpillAfter,
		Errors:        optionerr.Errors{Sentinel: ErrInvalidOption},
	}
}

// fillDefaults sets what the options left unset and depends on db: the
// registry of the plugin installed on db, a worker id, slog's default
// logger, and the poll interval (longer where the relay is woken by
// LISTEN on kind's database).
func (c *config) fillDefaults(db *gorm.DB, kind dialect.Kind) {
	if p, err := outbox.Lookup(db); c.registry == nil && err == nil {
		c.registry = p.Registry
	}
	if c.workerID == "" {
		c.workerID = defaultWorkerID()
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.pollInterval == 0 {
		c.pollInterval = DefaultPollInterval
		if kind.Driver().Listens() && c.listen {
			c.pollInterval = DefaultListenPollInterval
		}
	}
}

// WithBatchSize fixes how many events one claim takes (1 to 10000).
//
// By default the size adapts: a claim takes 100 events, and while claims
// come back full and their deliveries take less than an eighth of the
// lease, each next claim takes twice as many, up to 1000. (A claim that
// took as many partition keys as it walks counts as full: see the keys
// section of the package doc.) A claim that comes back short (the
// backlog is drained) returns to 100, and a
// delivery slower than that halves the size. Large claims cost the
// database less per event while a backlog lasts; small ones keep a
// relay's share of a short backlog small, so that other relays and keys
// get theirs.
func WithBatchSize(n int) Option {
	return func(c *config) {
		if n < 1 || n > 10000 {
			c.Fail("batch size %d is not between 1 and 10000", n)
		}
		c.batchSize, c.maxBatchSize = n, n
	}
}

// WithSynchronousCommit makes the relay's own statements (claims,
// completions, rescues) wait for their commit to reach disk.
//
// By default, on PostgreSQL, they commit with synchronous_commit off for
// their own transactions only (the business transactions that write events,
// and every other statement of the pool, are untouched). They then cost
// the relay no disk flush of its own, which on most disks is what limits a
// relay. Nothing is lost: a database crash can undo the relay's last
// fraction of a second of bookkeeping (PostgreSQL flushes it within
// 3 × wal_writer_delay), which makes the events it covered deliverable
// again, as after a relay crash (at least once), and never loses a
// committed event, which the writer's own transaction made durable. Use
// this option where redeliveries after a database crash must be rarer
// than that. MySQL and SQLite always commit the relay's statements
// as they commit every other.
func WithSynchronousCommit() Option {
	return func(c *config) { c.syncCommit = true }
}

// WithPollInterval sets how long an idle relay waits before claiming again
// (default 500ms; 5s on PostgreSQL, where LISTEN/NOTIFY wakes it as soon as
// events commit). While batches come back non-empty the relay claims again
// at once.
func WithPollInterval(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond || d > time.Hour {
			c.Fail("poll interval %v is not between 1ms and 1h", d)
		}
		c.pollInterval = d
	}
}

// WithLease sets how long a claim holds its events (default 30s, at least
// 1s). A batch must be delivered within the lease: deliveries get a context
// that ends shortly before it (a delivery that does not return then is
// given up and left to the rescue of its expired lease), and once it has
// expired another relay may rescue and claim the events, after which this
// relay's completions are refused.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d < time.Second || d > 24*time.Hour {
			c.Fail("lease %v is not between 1s and 24h", d)
		}
		c.lease = d
	}
}

// WithConcurrency sets how many deliveries of one batch run at once
// (default 10, 1 to 1000). A BatchPublisher gets the whole batch instead.
func WithConcurrency(n int) Option {
	return func(c *config) {
		if n < 1 || n > 1000 {
			c.Fail("concurrency %d is not between 1 and 1000", n)
		}
		c.concurrency = n
	}
}

// WithMaxAttempts sets the attempts of events that do not set their own
// Event.MaxAttempts (default 25). An event that fails its last attempt is
// dead.
func WithMaxAttempts(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.Fail("max attempts %d is less than 1", n)
		}
		c.maxAttempts = n
	}
}

// WithBackoff sets the delay before attempt+1 after attempt failed
// (default DefaultBackoff). The function must be safe for concurrent use.
func WithBackoff(f func(attempt int) time.Duration) Option {
	return func(c *config) {
		if f == nil {
			c.Fail("backoff function is nil")
		}
		c.backoff = f
	}
}

// WithWorkerID names the relay in locked_by, logs and heartbeats (default
// host-pid-random). Two running relays must not share an id.
func WithWorkerID(id string) Option {
	return func(c *config) {
		if id == "" || len(id) > 128 {
			c.Fail("worker id %q must be 1 to 128 characters", id)
		}
		c.workerID = id
	}
}

// WithLogger sets the logger (default slog.Default()). Batches are logged
// at debug, failures at warn, dead letters at error, with the event id and
// type but never the payload.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.Fail("logger is nil")
		}
		c.logger = l
	}
}

// WithOnDead sets a function called once for each event the relay marks
// dead, after the mark has committed, with the reason and the envelope as
// it would be delivered (for an event rescued after its relay crashed, its
// payload is read back for the call; should that read fail, the envelope
// comes without its payload, and the failure is logged). Use it to alert.
// It may be called from several goroutines at once (deliveries and lease
// rescues), so it must be safe for concurrent use.
func WithOnDead(f func(ctx context.Context, e *outbox.Envelope, reason error)) Option {
	return func(c *config) { c.onDead = f }
}

// WithRetention sets how long published events are kept before the relay
// deletes them, in small batches (default 24h). Zero or less keeps them.
// Dead events are never deleted by the relay.
func WithRetention(age time.Duration) Option {
	return func(c *config) { c.retention = age }
}

// WithListen turns PostgreSQL's LISTEN/NOTIFY wake-up on or off (default
// on). LISTEN runs on a connection of the relay's own, opened from the
// dialector's DSN; a dialector given an open pool has none, and the relay
// then takes one connection of that pool for good (or polls, if the pool
// holds only one). Turn it off behind a transaction-pooling PgBouncer,
// where LISTEN does not work; the relay then polls.
func WithListen(on bool) Option {
	return func(c *config) { c.listen = on }
}

// DefaultBackoff is exponential with jitter: about 1s after the first
// failed attempt, doubling each time, capped at one hour, each delay drawn
// uniformly from its upper half.
func DefaultBackoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := time.Hour
	if attempt <= 12 {
		d = min(time.Hour, time.Second<<(attempt-1))
	}
	return d/2 + rand.N(d/2+1)
}

func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relay"
	}
	if len(host) > 80 {
		host = host[:80]
	}
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatUint(rand.Uint64()&0xffffff, 36)
}

// WithMeterProvider sets where the relay's metrics go (default
// otel.GetMeterProvider(), a no-op unless the application installed one).
// The relay counts events claimed, published, failed, dead and released
// and leases lost; records publish duration and commit-to-publish lag
// histograms; and observes the pending count and the oldest pending age.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.Fail("meter provider is nil")
		}
		c.meter = mp
	}
}

// WithTracerProvider sets where the relay's spans go (default
// otel.GetTracerProvider()). Each claim is a span, and each delivery a span
// that is a child of the span that emitted the event (its traceparent);
// the delivered envelope's traceparent names the delivery span, so that
// consumers continue the trace.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.Fail("tracer provider is nil")
		}
		c.tracer = tp
	}
}

// WithHeartbeat sets how often the relay records itself in the relays
// table (default 10s), which GetStats reads to list live and stale relays.
// Zero turns heartbeats off.
func WithHeartbeat(every time.Duration) Option {
	return func(c *config) {
		if every < 0 || (every > 0 && every < 100*time.Millisecond) {
			c.Fail("heartbeat %v is neither 0 nor at least 100ms", every)
		}
		c.heartbeat = every
	}
}
