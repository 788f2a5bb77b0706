package sqlite

import (
	"context"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// Claim runs one UPDATE … RETURNING: SQLite runs one writer at a time,
// so the statement is atomic, and a single statement takes the write lock
// at once (no deferred-transaction upgrade to fail). A claim that did not
// fill the batch from the keys after the cursor, nor took p.MaxHeads()
// keys, claims again from the first key up to the cursor.
func (d Driver) Claim(ctx context.Context, db *gorm.DB, p sqldriver.ClaimParams) ([]sqldriver.ClaimedEvent, error) {
	q := strings.ReplaceAll(claimSQL, "{table}", p.Table)
	now := time.Now()
	args := map[string]any{"worker": p.Worker, "until": d.Time(now.Add(p.Lease)), "now": d.Time(now), "cursor": p.Cursor}
	var out []sqldriver.ClaimedEvent
	heads := p.MaxHeads()
	for i, rng := range []string{"partition_key > @from", "partition_key <= @cursor"} {
		if i == 1 {
			heads -= keysOf(out)
			if len(out) == p.Limit || p.Cursor == "" || heads <= 0 {
				break
			}
			args["from"] = ""
		} else {
			args["from"] = p.Cursor
		}
		args["limit"], args["heads"] = p.Limit-len(out), heads
		got, err := claimRange(ctx, db, strings.ReplaceAll(q, "{range}", rng), args)
		out = append(out, got...)
		if err != nil {
			if i == 1 && len(out) > 0 {
				break // what the first statement claimed is the batch
			}
			return nil, err
		}
	}
	return out, nil
}

// keysOf counts the partition keys of rows (events without a key not
// counted).
func keysOf(rows []sqldriver.ClaimedEvent) int {
	seen := map[string]struct{}{}
	for i := range rows {
		if k := rows[i].PartitionKey; k != "" {
			seen[k] = struct{}{}
		}
	}
	return len(seen)
}

func claimRange(ctx context.Context, db *gorm.DB, q string, args map[string]any) ([]sqldriver.ClaimedEvent, error) {
	rows, err := db.WithContext(ctx).Raw(q, args).Rows()
	if err != nil {
		return nil, err
	}
	return sqldriver.ScanClaimed(rows)
}

// Returning is true: UPDATE … RETURNING (SQLite 3.35+).
func (Driver) Returning() bool { return true }

// ConcurrentWriters is false: SQLite has one writer.
func (Driver) ConcurrentWriters() bool { return false }

// Listens is false: the relay polls.
func (Driver) Listens() bool { return false }

// claimSQL is the claim on SQLite, for the keys in {range}. The walk
// over the keys (a recursive CTE, which SQLite materializes) steps from
// head to head along the key index, counts the claimable heads it passes
// and stops at @heads; each run is another recursive CTE, from key index
// entry to the next. Every step is one scalar subquery that returns the
// next entry's id, negated when that event is not claimable (see
// signedID): one index step and one row lookup per key and per event, where
// testing claimability in a second subquery would take them twice. The
// CTEs use scalar subqueries rather than joins: a join with a CTE makes
// SQLite build a Bloom filter over the whole table first.
const claimSQL = `WITH RECURSIVE
walk(h, found) AS (
	SELECT (SELECT ` + signedID + ` FROM {table}
	        WHERE partition_key > @from AND {range} AND ` + sqldriver.KeyedUnfinished + `
	        ORDER BY partition_key, id LIMIT 1), 0
	UNION ALL
	SELECT (SELECT ` + signedID + ` FROM {table}
	        WHERE partition_key > (SELECT partition_key FROM {table} WHERE id = abs(walk.h))
	          AND {range} AND ` + sqldriver.KeyedUnfinished + `
	        ORDER BY partition_key, id LIMIT 1),
	       walk.found + (walk.h > 0)
	FROM walk WHERE walk.h IS NOT NULL AND walk.found + (walk.h > 0) < @heads
),
heads AS (
	SELECT id, partition_key AS k FROM {table}
	WHERE id IN (SELECT h FROM walk WHERE h > 0)
	  AND status IN ('pending', 'failed') AND available_at <= @now
),
runs(k, id, rn) AS (
	SELECT k, id, 1 FROM heads
	UNION ALL
	SELECT runs.k, (SELECT ` + signedID + ` FROM {table}
	                WHERE partition_key = runs.k AND ` + sqldriver.KeyedUnfinished + ` AND id > runs.id
	                ORDER BY id LIMIT 1),
	       runs.rn + 1 FROM runs
	WHERE runs.id > 0 AND runs.rn < (SELECT (@limit + count(*) - 1) / max(count(*), 1) FROM heads)
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
	                WHERE runs.id > 0
	                UNION ALL SELECT id, available_at, rn FROM unkeyed)
	ORDER BY rn, available_at, id
	LIMIT @limit)
RETURNING ` + sqldriver.ClaimColumns

// signedID is the id of the row a walk or run step found, negated when
// the event is not claimable now: the walk counts only positive heads, a
// run stops at the first negative id, and neither is claimed.
const signedID = "CASE WHEN status IN ('pending', 'failed') AND available_at <= @now THEN id ELSE -id END"
