package outboxtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/relay"
)

// DefaultMaxBatches bounds the batches one Drain runs (see MaxBatches).
const DefaultMaxBatches = 1000

// DrainOption configures Drain.
type DrainOption func(*drainConfig)

type drainConfig struct {
	stopOnFailure  bool
	allowFailures  bool
	deliverDelayed bool
	maxBatches     int
	relayOpts      []relay.Option
	err            error
}

// StopOnFailure makes Drain return after the first batch in which an event
// was not published (it failed, died, or was released by an Unavailable or
// Snooze error), instead of retrying failed events until they are
// published or dead. The event stays failed, with its attempt spent, for
// the test to inspect (Emitted with Status(outbox.StatusFailed)).
func StopOnFailure() DrainOption { return func(c *drainConfig) { c.stopOnFailure = true } }

// AllowFailures makes Drain report events that were not delivered only in
// its Result, for tests that expect failures or dead letters; by default
// each such event fails the test.
func AllowFailures() DrainOption { return func(c *drainConfig) { c.allowFailures = true } }

// DeliverDelayed makes Drain deliver events that are not due yet: before
// each batch, the pending and failed events whose available_at is in the
// future (Event.AvailableAt, a retry's backoff, a Snooze, the wait after an
// Unavailable) are made due now. It changes their available_at in the
// table. Without it, Drain leaves them waiting, as a relay would.
func DeliverDelayed() DrainOption { return func(c *drainConfig) { c.deliverDelayed = true } }

// MaxBatches sets how many batches Drain runs at most (default
// DefaultMaxBatches). A Drain that reaches it while events are still being
// claimed fails the test: a handler that never succeeds and never gives up
// (Snooze or Unavailable on every delivery, with DeliverDelayed) cannot
// make it loop forever.
func MaxBatches(n int) DrainOption {
	return func(c *drainConfig) {
		if n < 1 {
			c.err = fmt.Errorf("MaxBatches(%d): want at least 1", n)
		}
		c.maxBatches = n
	}
}

// RelayOptions passes options to the relay Drain runs, after its own, so
// that they win: relay.WithMaxAttempts to give up sooner,
// relay.WithConcurrency for concurrent deliveries, relay.WithBatchSize,
// relay.WithLogger. (A relay.WithOnDead given here replaces the one Drain
// uses to notice dead events that never reached the publisher.)
func RelayOptions(opts ...relay.Option) DrainOption {
	return func(c *drainConfig) { c.relayOpts = append(c.relayOpts, opts...) }
}

// Drain delivers the events of db's outbox through pub, synchronously, as
// a relay would, and returns the totals of its batches (an event retried
// counts once per attempt in Claimed and Failed). Pass an inproc.Mux to
// run your handlers, or a publisher of your own.
//
// It runs a relay.Relay's RunOnce until a batch claims nothing, with test
// settings: retries at once (zero backoff), one delivery at a time in claim
// order, a worker id of its own, and the relay's warnings and errors in
// the test log (t.Logf). A failing event is therefore retried until it is
// published or its attempts are spent (relay.WithMaxAttempts through
// RelayOptions; default 25). Events not due yet are left alone
// (DeliverDelayed delivers them).
//
// After draining, every event Drain tried to deliver that is not published
// fails the test with Errorf (not FailNow: the test goes on), listed with
// its state and last error, unless AllowFailures is given. A database
// error fails the test at once (FailNow), as does an invalid option or a
// db that is a transaction: the relay's claims and completions commit on
// their own, so commit the unit of work under test first. Drain uses db's
// context (db.WithContext).
func Drain(t TB, db *gorm.DB, pub relay.Publisher, opts ...DrainOption) relay.Result {
	t.Helper()
	if db != nil && walMode(t, "Drain", db) {
		return relay.Result{}
	}
	cfg := drainConfig{maxBatches: DefaultMaxBatches}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.err != nil:
		fatal(t, "outboxtest: Drain: %v", cfg.err)
		return relay.Result{}
	case db == nil || pub == nil:
		fatal(t, "outboxtest: Drain: db and pub must not be nil")
		return relay.Result{}
	case inTransaction(db):
		fatal(t, "outboxtest: Drain: db is a transaction; a relay's claims and completions commit on their own, "+
			"so pass the *gorm.DB itself, after the unit of work under test has committed")
		return relay.Result{}
	case db.Statement.Context != nil && db.Statement.Context.Err() != nil:
		fatal(t, "outboxtest: Drain: db's context has ended: %v", db.Statement.Context.Err())
		return relay.Result{}
	}
	rec := newAttempts()
	r, err := relay.New(db, rec.wrap(pub), append(cfg.defaults(t, rec), cfg.relayOpts...)...)
	if err != nil {
		fatal(t, "outboxtest: Drain: %v", err)
		return relay.Result{}
	}
	total, err := cfg.run(t, db, r)
	if err != nil {
		fatal(t, "outboxtest: Drain: %v", err)
		return total
	}
	if !cfg.allowFailures {
		rec.report(t, db)
	}
	return total
}

// defaults are the relay options of a Drain, before the caller's.
func (c *drainConfig) defaults(t TB, rec *attempts) []relay.Option {
	log := slog.New(slog.NewTextHandler(tbWriter{t}, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	return []relay.Option{
		relay.WithWorkerID("outboxtest-" + randomHex(4)),
		relay.WithBackoff(func(int) time.Duration { return 0 }),
		relay.WithConcurrency(1),
		relay.WithLogger(log),
		relay.WithOnDead(func(_ context.Context, e *outbox.Envelope, _ error) { rec.note(e.ID) }),
	}
}

// run runs batches until one claims nothing, or the limit. Only a database
// error is returned; reaching the limit is reported on t.
func (c *drainConfig) run(t TB, db *gorm.DB, r *relay.Relay) (relay.Result, error) {
	t.Helper()
	ctx := contextOf(db)
	var total relay.Result
	for range c.maxBatches {
		if err := ctx.Err(); err != nil { // said plainly, not as a failed statement
			return total, fmt.Errorf("db's context has ended: %w", err)
		}
		if c.deliverDelayed {
			if err := makeDue(db); err != nil {
				return total, err
			}
		}
		res, err := r.RunOnce(ctx)
		add(&total, res)
		if err != nil {
			return total, err
		}
		if res.Claimed == 0 || c.stopOnFailure && res.Published < res.Claimed {
			return total, nil
		}
	}
	t.Errorf("outboxtest: Drain: stopped after %d batches (MaxBatches) with events still being claimed: "+
		"a handler that snoozes or is unavailable on every delivery? (%+v)", c.maxBatches, total)
	return total, nil
}

func add(total *relay.Result, r relay.Result) {
	total.Claimed += r.Claimed
	total.Published += r.Published
	total.Failed += r.Failed
	total.Dead += r.Dead
	total.Released += r.Released
	total.Lost += r.Lost
}

// makeDue makes the pending and failed events that are not due yet due
// now, by the clock the relay's claims compare with.
func makeDue(db *gorm.DB) error {
	kind, err := dialect.Of(db)
	if err != nil {
		return err
	}
	table := tableOf(db)
	b := kind.NewBuilder()
	b.Add("UPDATE " + table + " SET available_at = ")
	b.Now()
	b.Add(" WHERE status IN ('pending', 'failed') AND available_at > ")
	b.Now()
	if err := session(db).Exec(b.SQL(), b.Args()...).Error; err != nil {
		return fmt.Errorf("making delayed events of %s due: %w", table, err)
	}
	return nil
}

// inTransaction reports whether db runs in a transaction.
func inTransaction(db *gorm.DB) bool {
	if db.Statement == nil {
		return false
	}
	_, ok := db.Statement.ConnPool.(gorm.TxCommitter)
	return ok
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
