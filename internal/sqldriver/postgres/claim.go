package postgres

import (
	"context"
	"strings"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Claim runs one UPDATE whose CTEs walk the keys, lock the claimable
// heads and the oldest events without a key (FOR UPDATE SKIP LOCKED), and
// pick the batch.
func (Driver) Claim(ctx context.Context, db *gorm.DB, p sqldriver.ClaimParams) ([]sqldriver.ClaimedEvent, error) {
	q := claimSQL
	if p.LazyCommit {
		q += " AND " + Driver{}.LazyCommit()
	}
	q += "\nRETURNING " + sqldriver.ClaimColumns
	rows, err := db.WithContext(ctx).Raw(strings.ReplaceAll(q, "{table}", p.Table), map[string]any{
		"worker": p.Worker, "lease": p.Lease.Microseconds(), "cursor": p.Cursor, "limit": p.Limit, "heads": p.MaxHeads(),
	}).Rows()
	if err != nil {
		return nil, err
	}
	return sqldriver.ScanClaimed(rows)
}

// Returning is true: UPDATE … RETURNING.
func (Driver) Returning() bool { return true }

// ConcurrentWriters is true.
func (Driver) ConcurrentWriters() bool { return true }

// Listens is true: InsertEvents NOTIFYs the table's channel, delivered
// when the transaction that inserted the events commits.
func (Driver) Listens() bool { return true }

// claimSQL is the claim on PostgreSQL. The walk over the keys is a
// recursive CTE that PostgreSQL evaluates lazily: it stops once heads has
// found @heads claimable heads. A run is read with a row comparison on
// (partition_key, id) so that only the key index can serve it (with
// "partition_key = …" the planner may prefer walking the primary key from
// the head's id, which reads every later event of every key). The UPDATE
// takes ids by = ANY(ARRAY(…)), which keeps it on primary-key lookups.
const claimSQL = `WITH RECURSIVE
after_cursor(k, h) AS (
	(SELECT partition_key, id FROM {table}
	 WHERE partition_key > @cursor AND ` + sqldriver.KeyedUnfinished + `
	 ORDER BY partition_key, id LIMIT 1)
	UNION ALL
	(SELECT n.partition_key, n.id FROM after_cursor c CROSS JOIN LATERAL (
		SELECT partition_key, id FROM {table}
		WHERE partition_key > c.k AND ` + sqldriver.KeyedUnfinished + `
		ORDER BY partition_key, id LIMIT 1) n)
),
up_to_cursor(k, h) AS (
	(SELECT partition_key, id FROM {table}
	 WHERE partition_key <= @cursor AND ` + sqldriver.KeyedUnfinished + `
	 ORDER BY partition_key, id LIMIT 1)
	UNION ALL
	(SELECT n.partition_key, n.id FROM up_to_cursor c CROSS JOIN LATERAL (
		SELECT partition_key, id FROM {table}
		WHERE partition_key > c.k AND partition_key <= @cursor AND ` + sqldriver.KeyedUnfinished + `
		ORDER BY partition_key, id LIMIT 1) n)
),
heads AS (
	SELECT e.id, e.partition_key, e.available_at FROM (SELECT h FROM after_cursor UNION ALL SELECT h FROM up_to_cursor) s
	CROSS JOIN LATERAL (
		SELECT e.id, e.partition_key, e.available_at FROM {table} e
		WHERE e.id = s.h AND e.status IN ('pending', 'failed') AND e.available_at <= now()
		FOR UPDATE SKIP LOCKED) e
	LIMIT @heads
),
runs AS (
	SELECT id, available_at, 1::bigint AS rn FROM heads
	UNION ALL
	SELECT r.id, r.available_at, r.rn FROM heads h CROSS JOIN LATERAL (
		SELECT q.id, q.available_at, 1 + row_number() OVER w AS rn,
		       bool_and(q.status IN ('pending', 'failed') AND q.available_at <= now()) OVER w AS ok
		FROM (SELECT id, status, available_at FROM {table}
		      WHERE (partition_key, id) > (h.partition_key, h.id) AND partition_key <= h.partition_key
		        AND ` + sqldriver.KeyedUnfinished + `
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
  AND o.status IN ('pending', 'failed')`
