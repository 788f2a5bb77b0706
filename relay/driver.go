package relay

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
)

// driver is what differs between the databases in the relay: how to claim
// a batch atomically, and whether the database can wake a relay when
// events commit. Everything else is shared SQL with dialect.Kind's clock
// expressions.
type driver interface {
	// claim marks up to limit claimable events as publishing by worker for
	// lease, bumping claim_version and attempts, and returns them as they
	// are after the claim. It takes events without a key oldest first,
	// and of each partition key the head run: its oldest unfinished event
	// and the claimable events that follow it (see the package doc, Order).
	claim(ctx context.Context, db *gorm.DB, worker string, limit int, lease time.Duration) ([]outbox.OutboxEvent, error)
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
}

func newDriver(kind dialect.Kind, table string) driver {
	switch kind {
	case dialect.Postgres:
		return &postgresDriver{table: table}
	case dialect.MySQL:
		return &mysqlDriver{table: table}
	default:
		return &sqliteDriver{table: table}
	}
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

// keyedUnfinished is the predicate of the key index on PostgreSQL and
// SQLite (partial indexes): a query must state it for the index to serve.
const keyedUnfinished = `status IN ('pending', 'publishing', 'failed') AND partition_key <> ''`

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

// postgresDriver claims with one UPDATE whose CTEs walk the keys, lock the
// claimable heads and the oldest events without a key (FOR UPDATE SKIP
// LOCKED), and pick the batch; it listens for the table's NOTIFY channel.
type postgresDriver struct {
	table  string
	cursor keyCursor
	query  string
	once   sync.Once
}

func (d *postgresDriver) claim(ctx context.Context, db *gorm.DB, worker string, limit int, lease time.Duration) ([]outbox.OutboxEvent, error) {
	d.once.Do(func() { d.query = strings.ReplaceAll(postgresClaim, "{table}", d.table) })
	from := d.cursor.get()
	rows, err := db.WithContext(ctx).Raw(d.query, map[string]any{
		"worker": worker, "lease": lease.Microseconds(), "cursor": from, "limit": limit,
	}).Rows()
	if err != nil {
		return nil, err
	}
	out, err := scanClaimed(rows)
	if err == nil {
		d.cursor.advance(from, out)
	}
	return out, err
}

// postgresClaim is the claim on PostgreSQL. The walk over the keys is a
// recursive CTE that PostgreSQL evaluates lazily: it stops once heads has
// found @limit claimable heads. A run is read with a row comparison on
// (partition_key, id) so that only the key index can serve it (with
// "partition_key = …" the planner may prefer walking the primary key from
// the head's id, which reads every later event of every key). The UPDATE
// takes ids by = ANY(ARRAY(…)), which keeps it on primary-key lookups.
const postgresClaim = `WITH RECURSIVE
after_cursor(k, h) AS (
	(SELECT partition_key, id FROM {table}
	 WHERE partition_key > @cursor AND ` + keyedUnfinished + `
	 ORDER BY partition_key, id LIMIT 1)
	UNION ALL
	(SELECT n.partition_key, n.id FROM after_cursor c CROSS JOIN LATERAL (
		SELECT partition_key, id FROM {table}
		WHERE partition_key > c.k AND ` + keyedUnfinished + `
		ORDER BY partition_key, id LIMIT 1) n)
),
up_to_cursor(k, h) AS (
	(SELECT partition_key, id FROM {table}
	 WHERE partition_key <= @cursor AND ` + keyedUnfinished + `
	 ORDER BY partition_key, id LIMIT 1)
	UNION ALL
	(SELECT n.partition_key, n.id FROM up_to_cursor c CROSS JOIN LATERAL (
		SELECT partition_key, id FROM {table}
		WHERE partition_key > c.k AND partition_key <= @cursor AND ` + keyedUnfinished + `
		ORDER BY partition_key, id LIMIT 1) n)
),
heads AS (
	SELECT e.id, e.partition_key, e.available_at FROM (SELECT h FROM after_cursor UNION ALL SELECT h FROM up_to_cursor) s
	CROSS JOIN LATERAL (
		SELECT e.id, e.partition_key, e.available_at FROM {table} e
		WHERE e.id = s.h AND e.status IN ('pending', 'failed') AND e.available_at <= now()
		FOR UPDATE SKIP LOCKED) e
	LIMIT @limit
),
runs AS (
	SELECT id, available_at, 1::bigint AS rn FROM heads
	UNION ALL
	SELECT r.id, r.available_at, r.rn FROM heads h CROSS JOIN LATERAL (
		SELECT q.id, q.available_at, 1 + row_number() OVER w AS rn,
		       bool_and(q.status IN ('pending', 'failed') AND q.available_at <= now()) OVER w AS ok
		FROM (SELECT id, status, available_at FROM {table}
		      WHERE (partition_key, id) > (h.partition_key, h.id) AND partition_key <= h.partition_key
		        AND ` + keyedUnfinished + `
		      ORDER BY partition_key, id
		      LIMIT (SELECT (@limit + count(*) - 1) / greatest(count(*), 1) - 1 FROM heads)) q
		WINDOW w AS (ORDER BY q.id)) r
	WHERE r.ok
),
unkeyed AS (
	SELECT id, available_at, 1::bigint AS rn FROM {table}
	WHERE status IN ('pending', 'failed') AND partition_key = '' AND available_at <= now()
	ORDER BY available_at, id
	LIMIT @limit
	FOR UPDATE SKIP LOCKED
)
UPDATE {table} AS o
SET status = 'publishing', locked_by = @worker,
    locked_until = clock_timestamp() + @lease * interval '1 microsecond',
    claim_version = o.claim_version + 1, attempts = o.attempts + 1
WHERE o.id = ANY(ARRAY(
	SELECT c.id FROM (SELECT id, available_at, rn FROM runs UNION ALL SELECT id, available_at, rn FROM unkeyed) c
	ORDER BY c.rn, c.available_at, c.id
	LIMIT @limit))
  AND o.status IN ('pending', 'failed')
RETURNING ` + claimColumns

// sqliteDriver claims with one UPDATE … RETURNING: SQLite runs one writer
// at a time, so the statement is atomic, and a single statement takes the
// write lock at once (no deferred-transaction upgrade to fail). A claim
// that did not fill the batch from the keys after the cursor claims again
// from the first key up to the cursor.
type sqliteDriver struct {
	table  string
	cursor keyCursor
	once   sync.Once
	after  string // the claim over the keys after @cursor
	upTo   string // the claim over the keys up to @cursor
}

func (d *sqliteDriver) claim(ctx context.Context, db *gorm.DB, worker string, limit int, lease time.Duration) ([]outbox.OutboxEvent, error) {
	d.once.Do(func() {
		q := strings.ReplaceAll(sqliteClaim, "{table}", d.table)
		d.after = strings.ReplaceAll(q, "{range}", "partition_key > @from")
		d.upTo = strings.ReplaceAll(q, "{range}", "partition_key <= @cursor")
	})
	now := time.Now()
	k := dialect.SQLite
	from := d.cursor.get()
	args := map[string]any{"worker": worker, "until": k.Time(now.Add(lease)), "now": k.Time(now), "cursor": from}
	var out []outbox.OutboxEvent
	for i, q := range []string{d.after, d.upTo} {
		if i == 1 {
			if len(out) == limit || from == "" {
				break
			}
			args["from"] = ""
		} else {
			args["from"] = from
		}
		args["limit"] = limit - len(out)
		got, err := sqliteExec(ctx, db, q, args)
		out = append(out, got...)
		if err != nil {
			if i == 1 && len(out) > 0 {
				break // what the first statement claimed is the batch
			}
			return nil, err
		}
	}
	d.cursor.advance(from, out)
	return out, nil
}

func sqliteExec(ctx context.Context, db *gorm.DB, q string, args map[string]any) ([]outbox.OutboxEvent, error) {
	rows, err := db.WithContext(ctx).Raw(q, args).Rows()
	if err != nil {
		return nil, err
	}
	return scanClaimed(rows)
}

// sqliteClaim is the claim on SQLite, for the keys in {range}. The walk
// over the keys (a recursive CTE, which SQLite materializes) counts the
// claimable heads it passes and stops at @limit; each run is another
// recursive CTE, from key index entry to the next. Both use scalar
// subqueries rather than joins: a join with a CTE makes SQLite build a
// Bloom filter over the whole table first.
const sqliteClaim = `WITH RECURSIVE
walk(k, found) AS (
	SELECT (SELECT min(partition_key) FROM {table}
	        WHERE partition_key > @from AND {range} AND ` + keyedUnfinished + `), 0
	UNION ALL
	SELECT (SELECT min(partition_key) FROM {table}
	        WHERE partition_key > walk.k AND {range} AND ` + keyedUnfinished + `),
	       walk.found + ` + sqliteHeadClaimable + `
	FROM walk WHERE walk.k IS NOT NULL AND walk.found + ` + sqliteHeadClaimable + ` < @limit
),
heads AS (
	SELECT id, partition_key AS k FROM {table}
	WHERE id IN (SELECT ` + sqliteHead + ` FROM walk WHERE walk.k IS NOT NULL)
	  AND status IN ('pending', 'failed') AND available_at <= @now
),
runs(k, id, rn) AS (
	SELECT k, id, 1 FROM heads
	UNION ALL
	SELECT runs.k, ` + sqliteNext + `, runs.rn + 1 FROM runs
	WHERE runs.rn < (SELECT (@limit + count(*) - 1) / max(count(*), 1) FROM heads)
	  AND EXISTS (SELECT 1 FROM {table} x WHERE x.id = ` + sqliteNext + `
	              AND x.status IN ('pending', 'failed') AND x.available_at <= @now)
),
unkeyed AS (
	SELECT id, available_at, 1 AS rn FROM {table}
	WHERE status IN ('pending', 'failed') AND partition_key = '' AND available_at <= @now
	ORDER BY available_at, id
	LIMIT @limit
)
UPDATE {table}
SET status = 'publishing', locked_by = @worker, locked_until = @until,
    claim_version = claim_version + 1, attempts = attempts + 1
WHERE id IN (
	SELECT id FROM (SELECT id, (SELECT available_at FROM {table} WHERE id = runs.id) AS available_at, rn FROM runs
	                UNION ALL SELECT id, available_at, rn FROM unkeyed)
	ORDER BY rn, available_at, id
	LIMIT @limit)
RETURNING ` + claimColumns

// sqliteHead is the id of the head of key walk.k, sqliteHeadClaimable 1
// when it is claimable now, sqliteNext the id of the unfinished event of
// key runs.k that follows runs.id.
const (
	sqliteHead = `(SELECT min(id) FROM {table} WHERE partition_key = walk.k AND ` + keyedUnfinished + `)`

	sqliteHeadClaimable = `EXISTS (SELECT 1 FROM {table} e WHERE e.id = ` + sqliteHead + `
	  AND e.status IN ('pending', 'failed') AND e.available_at <= @now)`

	sqliteNext = `(SELECT min(id) FROM {table} WHERE partition_key = runs.k AND ` + keyedUnfinished + ` AND id > runs.id)`
)

func (d *sqliteDriver) wakeups(context.Context, *gorm.DB, *slog.Logger) <-chan struct{} { return nil }
func (d *sqliteDriver) notify(*gorm.DB)                                                 {}
func (d *sqliteDriver) analyze(context.Context, *gorm.DB) error                         { return nil }
func (d *sqliteDriver) concurrentWriters() bool                                         { return false }
func (d *sqliteDriver) returning() bool                                                 { return true }
