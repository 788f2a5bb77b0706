package relay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Publisher delivers one event. It returns nil once the event is delivered
// (handed to a broker, or handled), outbox.Permanent(err) when delivery can
// never succeed, outbox.Unavailable(err) when its transport is down,
// outbox.Snooze(err, d) when the event cannot be handled yet (deliver it
// again after d, spending no attempt: for example an idempotency key held
// by another delivery), and any other error for a failure worth retrying.
// The context ends shortly before the relay's lease on the event expires.
//
// Publish may run concurrently (see WithConcurrency). It may be called
// again for an event it already delivered (after a crash, or a lost lease):
// delivery is at least once, so make deliveries idempotent by event id.
//
// # Is the broker down?
//
// Every adapter of this module marks an error outbox.Unavailable (the
// relay releases the event without spending an attempt, and backs off) by
// one rule, and no other: the broker is down when
//
//   - the context ended before the broker answered (the relay's deadline:
//     the broker was too slow; the event is not at fault), or the error is
//     the end of a context (context.DeadlineExceeded, context.Canceled,
//     such as a confirm or acknowledgement that did not come in time);
//   - the connection failed: a net.Error (dial, read, write, timeout), an
//     EOF under a command, a closed connection, a refused, reset or
//     unreachable peer;
//   - the broker says it cannot take messages now: a closed or
//     reconnecting client, an exhausted pool, a server loading, failing
//     over, read-only, out of memory, full of clients or refusing the
//     client's credentials, a JetStream 503, a negative confirm.
//
// Anything the broker says of the message itself (too large, a bad name,
// no route, a refusal of this message) is not an outage: it spends an
// attempt, or is outbox.Permanent. Custom publishers should follow the
// same rule.
type Publisher interface {
	Publish(ctx context.Context, e *outbox.Envelope) error
}

// BatchPublisher is a Publisher that can deliver a whole batch at once,
// such as a Redis pipeline. The relay uses PublishBatch when the publisher
// implements it. The result holds one error per envelope, in order. A call
// holds at most one event per partition key: the next event of a key comes
// in a later call, once the previous one was delivered.
type BatchPublisher interface {
	Publisher
	PublishBatch(ctx context.Context, es []*outbox.Envelope) []error
}

// Validator is implemented by publishers that can be misconfigured, such as
// the adapters, whose constructors return no error: New calls Validate and
// refuses a publisher whose configuration is invalid.
type Validator interface {
	Validate() error
}

// PublisherFunc adapts a function to Publisher.
type PublisherFunc func(ctx context.Context, e *outbox.Envelope) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, e *outbox.Envelope) error { return f(ctx, e) }

// ErrRunning is returned by Start and RunOnce while the relay is running.
var ErrRunning = errors.New("relay: already running")

// Result counts what one batch did.
type Result struct {
	// Claimed events were taken from the table by this batch.
	Claimed int
	// Published events were delivered and marked published.
	Published int
	// Failed events are scheduled for another attempt.
	Failed int
	// Dead events have no attempts left, or failed permanently.
	Dead int
	// Released events were handed back without spending an attempt: the
	// publisher was unavailable or snoozed them, or the relay was stopping.
	Released int
	// Lost completions were refused: the relay's lease had expired and
	// another relay took the events over (rescued or claimed them) before
	// the completion reached the database.
	Lost int
	// Abandoned deliveries had not returned shortly before the batch's
	// lease ended (a publisher that ignores its context): the relay went
	// on without them and left them publishing, for the rescue of their
	// expired lease, which counts each the attempt it took.
	Abandoned int
	// Rescued events had a claim whose lease expired without an outcome
	// (a relay crashed, stalled or abandoned their delivery): this relay's
	// rescue took them back, counting that claim as an attempt. Those
	// with no attempts left went dead and are counted in Dead too; a rescue
	// counts in neither Failed nor Claimed.
	Rescued int
}

// add adds the outcomes of o to r (not its claims).
func (r *Result) add(o Result) {
	r.Published += o.Published
	r.Failed += o.Failed
	r.Dead += o.Dead
	r.Released += o.Released
	r.Lost += o.Lost
	r.Abandoned += o.Abandoned
	r.Rescued += o.Rescued
}

// Relay claims committed outbox events and delivers them through a
// Publisher, at least once. Run many relays against one database: claims
// never overlap (SKIP LOCKED and conditional updates), leases expire when a
// relay dies, and fencing tokens refuse the completions of a relay whose
// lease expired. See the package documentation for the guarantees.
type Relay struct {
	db       *gorm.DB
	pub      Publisher
	batchPub BatchPublisher
	cfg      config
	kind     dialect.Kind
	drv      driver
	table    string
	log      *slog.Logger
	inst     *instruments
	trace    *tracing

	mu      sync.Mutex
	running bool

	background   sync.WaitGroup // goroutines Start and RunOnce wait for
	held         heldBatches    // claimed batches not completed yet
	analyzing    atomic.Bool
	lastAnalyze  atomic.Int64              // unix nanoseconds
	analyzeError atomic.Bool               // ANALYZE was refused once: stop trying
	late         lateOutcomes              // outcomes known but not recorded within their lease
	attempts     *attemptTable             // the attempt log table, whether this relay writes it or not
	size         atomic.Int64              // the next claim's size (see WithBatchSize)
	depth        runDepth                  // the next claim's events per key
	claimConn    atomic.Pointer[claimConn] // while Start runs, where the database caches plans per connection
}

// New returns a Relay that delivers the events of db's outbox table (the
// table of the outbox.Plugin installed on db, or outbox.DefaultTableName)
// through pub. It validates the options and fails with an error wrapping
// ErrInvalidOption on a bad one, or on a MySQL connection opened without
// parseTime=true. It fails with an error wrapping outbox.ErrNotMigrated
// when a table it uses does not exist (see outbox.Migrate).
func New(db *gorm.DB, pub Publisher, opts ...Option) (*Relay, error) {
	if err := checkArgs(db, pub); err != nil {
		return nil, err
	}
	kind, err := dialect.Of(db)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
	}
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	cfg.fillDefaults(db, kind)
	table := tableOf(db)
	tables := kind.OutboxTables(table)
	if cfg.attemptLog {
		tables = append(tables, sqldriver.AttemptsTable(table))
	}
	if err := checkDB(db, tables); err != nil {
		return nil, err
	}
	if cfg.attemptLog {
		if err := checkReceiptColumn(db, sqldriver.AttemptsTable(table)); err != nil {
			return nil, err
		}
	}
	r := &Relay{
		db:    db.Session(&gorm.Session{NewDB: true, SkipDefaultTransaction: true}),
		pub:   pub,
		cfg:   cfg,
		kind:  kind,
		drv:   withStoredTimes(kind, newDriver(kind, table, !cfg.syncCommit)),
		table: table,
		log:   cfg.logger.With(slog.String("relay", cfg.workerID)),
	}
	r.attempts = newAttemptTable(kind, table, cfg.attemptLog)
	r.batchPub, _ = pub.(BatchPublisher)
	r.size.Store(int64(cfg.batchSize))
	mp, tp := defaultProviders(cfg.meter, cfg.tracer)
	r.trace = &tracing{tracer: tp.Tracer(instrumentationName), relay: cfg.workerID, table: table}
	if r.inst, err = newInstruments(mp); err != nil {
		return nil, fmt.Errorf("relay: creating metrics: %w", err)
	}
	return r, nil
}

// checkArgs refuses a nil db or publisher, and a publisher whose Validate
// fails.
func checkArgs(db *gorm.DB, pub Publisher) error {
	if db == nil {
		return fmt.Errorf("%w: db is nil", ErrInvalidOption)
	}
	if pub == nil {
		return fmt.Errorf("%w: publisher is nil", ErrInvalidOption)
	}
	if v, ok := pub.(Validator); ok {
		if err := v.Validate(); err != nil {
			return fmt.Errorf("%w: publisher: %w", ErrInvalidOption, err)
		}
	}
	return nil
}

// checkDB refuses a connection whose settings the relay cannot work with
// and a database whose outbox tables were not created.
func checkDB(db *gorm.DB, tables []string) error {
	if err := dialect.CheckConn(db, ErrInvalidOption); err != nil {
		return err
	}
	missing, err := dialect.MissingTables(db, tables...)
	if err != nil {
		return fmt.Errorf("relay: checking the outbox tables: %w", err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("relay: %w: missing table(s) %s: run outbox.Migrate (or `outbox migrate`)",
			outbox.ErrNotMigrated, strings.Join(missing, ", "))
	}
	return nil
}

// tableOf returns the outbox table of the plugin installed on db.
func tableOf(db *gorm.DB) string {
	if p, err := outbox.Lookup(db); err == nil {
		return p.Table()
	}
	return outbox.DefaultTableName
}

// WorkerID returns the relay's worker id, as stored in locked_by.
func (r *Relay) WorkerID() string { return r.cfg.workerID }

func (r *Relay) acquire() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		return ErrRunning
	}
	r.running = true
	return nil
}

func (r *Relay) release() {
	r.mu.Lock()
	r.running = false
	r.mu.Unlock()
}

// RunOnce rescues expired leases, then claims and delivers one batch and
// records the outcomes. It reads the table only: in WAL mode the slot is
// streamed by Start. It returns what the batch did; an error means the
// database could not be reached or refused a statement (nothing is lost:
// claimed events not completed become claimable when their lease expires).
// A failed completion is retried while the batch's lease lasts; outcomes
// still not recorded are kept, and a later RunOnce or Start of this Relay
// records them once their lease has expired, unless another relay rescued
// the events first (see the package documentation, Outcomes).
func (r *Relay) RunOnce(ctx context.Context) (Result, error) {
	if err := r.acquire(); err != nil {
		return Result{}, err
	}
	defer r.release()
	defer r.background.Wait()
	if _, err := r.rescue(ctx); err != nil {
		return Result{}, err
	}
	res, _, err := r.runBatch(ctx)
	return res, err
}
