package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// driver is what the relay needs of the database besides shared SQL: how
// to claim a batch atomically (the dialect's sqldriver.Claimer), and
// whether the database can wake a relay when events commit. Everything
// else is shared SQL with the dialect's clock expressions.
type driver interface {
	// claim marks up to limit claimable events as publishing by worker for
	// lease, bumping claim_version and attempts, and returns them as they
	// are after the claim. It takes events without a key oldest first,
	// and of each partition key the head run: its oldest unfinished event
	// and the claimable events that follow it (see the package doc, Order).
	claim(ctx context.Context, db *gorm.DB, worker string, limit, heads int, lease time.Duration) ([]outbox.OutboxEvent, error)
	// wakeups returns a channel that receives after events commit, or nil
	// when the database cannot say so (the relay then polls). The channel
	// is closed when ctx ends.
	wakeups(ctx context.Context, db *gorm.DB, log *slog.Logger) <-chan struct{}
	// notify wakes the relays waiting on wakeups (best effort).
	notify(db *gorm.DB)
	// returning reports whether UPDATE … RETURNING is available.
	returning() bool
	// analyze refreshes the planner's statistics of the table, where the
	// claim's plan depends on them; a no-op elsewhere.
	analyze(ctx context.Context, db *gorm.DB) error
	// concurrentWriters reports whether a batch's completion can run while
	// the next batch is claimed (SQLite has a single writer).
	concurrentWriters() bool
	// claimConnSQL returns the statements that set up the connection a
	// running relay keeps for its claims, and undo that before it goes
	// back to the pool (see claimConn); "", "" where the relay keeps none
	// (a connection does not cache the claim's plan).
	claimConnSQL() (setup, reset string)
}

// newDriver returns the relay's driver of the table on a database of
// kind: the LISTEN/NOTIFY driver (listen.go) where the database can wake
// relays, a polling one elsewhere; both claim through kind's
// sqldriver.Claimer, lazily committed (sqldriver.Statements.LazyCommit)
// when lazy is set. It panics on a Kind without a driver (Kinds come
// from dialect.Of, which refuses unknown dialects): there is no fallback.
func newDriver(kind dialect.Kind, table string, lazy bool) driver {
	sd := kind.Driver()
	c := &claimer{sql: sd, table: table, lazy: lazy}
	if sd.Listens() {
		return &postgresDriver{claimer: c, table: table}
	}
	return &pollingDriver{claimer: c}
}

// The claim, on every database, in two halves:
//
//   - Events without a key, oldest first (available_at, id), from the claim
//     index, which holds only claimable events without a key.
//   - Events with a key, from the key index, which holds the unfinished
//     (pending, publishing, failed) events with a key in (partition_key, id)
//     order. The claim walks it from key to key, one index probe per key,
//     starting after the key where this relay's previous claim ended (so
//     that every key gets its turn however many there are), and takes each
//     key whose head, its first unfinished event, is claimable now (not
//     publishing, available) and not locked by another claim. Then it takes
//     the run that follows each head: the next events of the key, in id
//     order, up to the first one that is not claimable, at most
//     ceil(limit/heads) per key.
//
// The batch is filled by position in run first (every head and every event
// without a key, oldest first, then every run's second event, …), so that
// keys share the batch. A key's events in a batch are therefore a prefix of
// its unfinished events; deliver sends them one after the other and
// releases the rest of a run after one that was not published.
//
// Per-key order holds because only the head of a key can be claimed on its
// own, a claim locks the head (SKIP LOCKED) before taking its run, and a
// key whose head is publishing is skipped: the events of a key that are in
// flight always precede those that are not.

// keyCursor is where a relay's walk over the keys resumes: the last key
// its previous claim took, in the order of that claim's walk. Keys are
// compared bytewise, as SQLite and MySQL (utf8mb4_bin) order them; on a
// PostgreSQL database whose collation orders otherwise the cursor may land
// a little off, which changes where the next walk starts (every walk goes
// round all the keys) and nothing else.
type keyCursor struct {
	mu  sync.Mutex
	key string
}

func (c *keyCursor) get() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.key
}

// advance moves the cursor past the keys of rows, claimed by a walk that
// started after from and wrapped around to the first key: the keys after
// from come first in that walk, then those up to from.
func (c *keyCursor) advance(from string, rows []outbox.OutboxEvent) {
	var after, before string
	for i := range rows {
		k := rows[i].PartitionKey
		switch {
		case k == "":
		case k > from:
			after = max(after, k)
		default:
			before = max(before, k)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if before != "" {
		c.key = before
	} else if after != "" {
		c.key = after
	}
}

// claimer claims through the dialect's sqldriver.Claimer, resuming the
// walk over the keys where this relay's previous claim ended.
type claimer struct {
	sql    sqldriver.Driver
	table  string
	lazy   bool
	cursor keyCursor
}

func (c *claimer) claim(ctx context.Context, db *gorm.DB, worker string, limit, heads int, lease time.Duration) ([]outbox.OutboxEvent, error) {
	from := c.cursor.get()
	rows, err := c.sql.Claim(ctx, db, sqldriver.ClaimParams{
		Table: c.table, Worker: worker, Limit: limit, Heads: heads, Lease: lease, Cursor: from, LazyCommit: c.lazy})
	if err != nil {
		return nil, err
	}
	out := claimedEvents(rows)
	c.cursor.advance(from, out)
	return out, nil
}

// claimedEvents returns rows as the publishing events they are.
func claimedEvents(rows []sqldriver.ClaimedEvent) []outbox.OutboxEvent {
	if rows == nil {
		return nil
	}
	out := make([]outbox.OutboxEvent, len(rows))
	for i := range rows {
		r := &rows[i]
		out[i] = outbox.OutboxEvent{
			ID: r.ID, EventID: r.EventID, Type: r.Type, Version: r.Version, TenantID: r.TenantID,
			AggregateType: r.AggregateType, AggregateID: r.AggregateID, PartitionKey: r.PartitionKey,
			Topic: r.Topic, Payload: r.Payload, Headers: r.Headers, Status: outbox.StatusPublishing,
			Attempts: r.Attempts, MaxAttempts: r.MaxAttempts, ClaimVersion: r.ClaimVersion,
			AvailableAt: r.AvailableAt, CreatedAt: r.CreatedAt,
		}
	}
	return out
}

// postgresDriver is the driver of a database that can wake relays:
// LISTEN/NOTIFY (listen.go).
type postgresDriver struct {
	*claimer
	table string
}

// pollingDriver is the driver of a database that cannot wake relays: the
// relay polls.
type pollingDriver struct {
	*claimer
}

func (d *pollingDriver) claimConnSQL() (string, string) { return "", "" }

func (d *pollingDriver) wakeups(context.Context, *gorm.DB, *slog.Logger) <-chan struct{} { return nil }
func (d *pollingDriver) notify(*gorm.DB)                                                 {}
func (d *pollingDriver) analyze(context.Context, *gorm.DB) error                         { return nil }
func (d *pollingDriver) concurrentWriters() bool                                         { return d.sql.ConcurrentWriters() }
func (d *pollingDriver) returning() bool                                                 { return d.sql.Returning() }
