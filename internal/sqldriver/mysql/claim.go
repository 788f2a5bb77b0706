package mysql

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// The states of an unfinished event, as the status column stores them.
const (
	statusPending    = "pending"
	statusFailed     = "failed"
	statusPublishing = "publishing"
)

// Claim claims in a short READ COMMITTED transaction of a few
// statements, each served by an index that leads with status (InnoDB has
// no partial indexes, and MariaDB no LATERAL and no lazy recursive CTE).
// It reads through secondary indexes without locking and locks only by
// primary key, skipping locked rows, so that claims never wait for each
// other:
//
//  1. walk the keys: the first pending, failed and publishing event of each
//     key after the cursor (a loose index scan over the key index, a
//     bounded number of keys per statement);
//  2. lock the heads that are claimable (FOR UPDATE SKIP LOCKED);
//  3. read the runs that follow them: one range of the key index for the
//     keys whose unfinished events are all pending, a short range per key
//     and state for the others;
//  4. lock the oldest events without a key (FOR UPDATE SKIP LOCKED);
//  5. pick the batch and UPDATE it by id.
//
// MariaDB has no UPDATE … RETURNING: the rows are read in steps 2 to 4.
func (Driver) Claim(ctx context.Context, db *gorm.DB, p sqldriver.ClaimParams) ([]sqldriver.ClaimedEvent, error) {
	var rows []sqldriver.ClaimedEvent
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		c := &claim{table: p.Table, tx: tx, limit: p.Limit, maxHeads: p.MaxHeads()}
		heads, err := c.heads(p.Cursor)
		if err != nil {
			return err
		}
		runs, err := c.runs(heads)
		if err != nil {
			return err
		}
		unkeyed, err := c.unkeyed()
		if err != nil {
			return err
		}
		rows = pick(p.Limit, heads, runs, unkeyed)
		return c.mark(rows, p.Worker, p.Lease)
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	for i := range rows { // as the UPDATE left them
		rows[i].ClaimVersion++
		rows[i].Attempts++
	}
	return rows, nil
}

// Returning is false: MariaDB has no UPDATE … RETURNING.
func (Driver) Returning() bool { return false }

// ConcurrentWriters is true.
func (Driver) ConcurrentWriters() bool { return true }

// Listens is false: the relay polls.
func (Driver) Listens() bool { return false }

// claim is one claim's transaction.
type claim struct {
	table    string
	tx       *gorm.DB
	limit    int
	maxHeads int // the most keys to take runs of
	// plain holds the walked keys whose unfinished events are all
	// pending: no failed or publishing event (see walk).
	plain map[string]bool
}

// unkeyed locks and reads claimable events without a key, at most limit,
// the oldest first: it reads the ids of the oldest 2×limit (a plain read of
// the claim index), then locks, oldest first, those that no other claim
// holds, by primary key. A locking read over a range of a secondary index would also lock
// the entry past its end (the first event with a key), which another
// claim may be updating: two claims would then wait for each other.
func (c *claim) unkeyed() ([]sqldriver.ClaimedEvent, error) {
	type candidate struct {
		id        int64
		available sqldriver.AnyTime
	}
	part := `(SELECT id, available_at FROM ` + c.table + `
		WHERE status = ? AND partition_key = '' AND available_at <= UTC_TIMESTAMP(6)
		ORDER BY available_at, id LIMIT ?)`
	rows, err := c.tx.Raw(part+" UNION ALL "+part, statusFailed, 2*c.limit, statusPending, 2*c.limit).Rows()
	if err != nil {
		return nil, fmt.Errorf("reading events without a key: %w", err)
	}
	var cands []candidate
	for rows.Next() {
		var e candidate
		if err := rows.Scan(&e.id, &e.available); err != nil {
			rows.Close()
			return nil, err
		}
		cands = append(cands, e)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(cands) == 0 {
		return nil, nil
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(a.available.T.Compare(b.available.T), cmp.Compare(a.id, b.id))
	})
	ids := make([]int64, 0, min(len(cands), 2*c.limit))
	for _, e := range cands[:min(len(cands), 2*c.limit)] {
		ids = append(ids, e.id)
	}
	// Lock the oldest first: by primary key, a chunk at a time of as many
	// as are still missing (a LIMIT here would keep the lowest ids, not
	// the oldest events).
	var out []sqldriver.ClaimedEvent
	for len(ids) > 0 && len(out) < c.limit {
		n := min(len(ids), c.limit-len(out))
		got, err := c.lockUnkeyed(ids[:n])
		if err != nil {
			return nil, err
		}
		out = append(out, got...)
		ids = ids[n:]
	}
	return out, nil
}

// lockUnkeyed locks those of the events without a key ids that are still
// claimable and not locked by another claim, and reads them.
func (c *claim) lockUnkeyed(ids []int64) ([]sqldriver.ClaimedEvent, error) {
	rows, err := c.tx.Raw(`SELECT `+sqldriver.ClaimColumns+` FROM `+c.table+` FORCE INDEX (PRIMARY)
		WHERE id IN ? AND status IN ('pending', 'failed') AND partition_key = '' AND available_at <= UTC_TIMESTAMP(6)
		FOR UPDATE SKIP LOCKED`, ids).Rows()
	if err != nil {
		return nil, fmt.Errorf("locking events without a key: %w", err)
	}
	return sqldriver.ScanClaimed(rows)
}

// mark claims rows for worker. Every row is locked or behind a locked head,
// so every row must be claimed; anything else is an error that rolls the
// claim back. The UPDATE goes by primary key (FORCE INDEX): through a
// status range of a secondary index, two claims lock rows in different
// orders and deadlock.
func (c *claim) mark(rows []sqldriver.ClaimedEvent, worker string, lease time.Duration) error {
	if len(rows) == 0 {
		return nil
	}
	ids := make([]int64, len(rows))
	for i := range rows {
		ids[i] = rows[i].ID
	}
	res := c.tx.Exec(`UPDATE `+c.table+` FORCE INDEX (PRIMARY)
		SET status = 'publishing', locked_by = ?, locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
		    claim_version = claim_version + 1, attempts = attempts + 1
		WHERE id IN ? AND status IN ('pending', 'failed')`, worker, lease.Microseconds(), ids)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != int64(len(ids)) {
		return fmt.Errorf("claimed %d of %d events: some changed during the claim", res.RowsAffected, len(ids))
	}
	return nil
}
