package relay

import (
	"context"
	"database/sql"
	"log/slog"
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
	// are after the claim.
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

// claimable is the condition of a claimable row e, without the status and
// clock test: the row must be the oldest unfinished event of its partition
// key, and no event of the key may be in flight.
func claimable(table string) string {
	return `(e.partition_key = '' OR NOT EXISTS (
		SELECT 1 FROM ` + table + ` p
		WHERE p.partition_key = e.partition_key
		  AND p.status IN ('pending', 'publishing', 'failed')
		  AND p.id <> e.id
		  AND (p.id < e.id OR p.status = 'publishing')))`
}

// postgresDriver claims with one UPDATE over a FOR UPDATE SKIP LOCKED
// subquery, and listens for the table's NOTIFY channel.
type postgresDriver struct{ table string }

func (d *postgresDriver) claim(ctx context.Context, db *gorm.DB, worker string, limit int, lease time.Duration) ([]outbox.OutboxEvent, error) {
	// id = ANY(ARRAY(…)) keeps the update on primary-key lookups; a join
	// with the subquery can turn into a hash join over the whole table.
	q := `UPDATE ` + d.table + ` AS o
		SET status = 'publishing', locked_by = ?,
		    locked_until = clock_timestamp() + ? * interval '1 microsecond',
		    claim_version = o.claim_version + 1, attempts = o.attempts + 1
		WHERE o.id = ANY(ARRAY(
			SELECT e.id FROM ` + d.table + ` e
			WHERE e.status IN ('pending', 'failed') AND e.available_at <= now()
			  AND ` + claimable(d.table) + `
			ORDER BY e.available_at, e.id
			LIMIT ?
			FOR UPDATE SKIP LOCKED))
		RETURNING ` + prefixed("o")
	rows, err := db.WithContext(ctx).Raw(q, worker, lease.Microseconds(), limit).Rows()
	if err != nil {
		return nil, err
	}
	return scanClaimed(rows)
}

// mysqlDriver claims in a short READ COMMITTED transaction: SELECT … FOR
// UPDATE SKIP LOCKED per claimable status (so that the (status,
// available_at) index delivers the order and only returned rows are
// locked), then UPDATE by id. MariaDB has no UPDATE … RETURNING and
// refuses LIMIT in an IN subquery.
type mysqlDriver struct{ table string }

func (d *mysqlDriver) claim(ctx context.Context, db *gorm.DB, worker string, limit int, lease time.Duration) ([]outbox.OutboxEvent, error) {
	sel := `SELECT ` + prefixed("e") + ` FROM ` + d.table + ` e
		WHERE e.status = ? AND e.available_at <= UTC_TIMESTAMP(6) AND ` + claimable(d.table) + `
		ORDER BY e.available_at, e.id
		LIMIT ?
		FOR UPDATE SKIP LOCKED`
	var rows []outbox.OutboxEvent
	err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		rows = rows[:0]
		// Retries that are due first, then new events.
		for _, status := range []outbox.Status{outbox.StatusFailed, outbox.StatusPending} {
			if len(rows) == limit {
				break
			}
			res, err := tx.Raw(sel, status, limit-len(rows)).Rows()
			if err != nil {
				return err
			}
			got, err := scanClaimed(res)
			if err != nil {
				return err
			}
			rows = append(rows, got...)
		}
		if len(rows) == 0 {
			return nil
		}
		ids := make([]int64, len(rows))
		for i := range rows {
			ids[i] = rows[i].ID
		}
		return tx.Exec(`UPDATE `+d.table+`
			SET status = 'publishing', locked_by = ?, locked_until = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
			    claim_version = claim_version + 1, attempts = attempts + 1
			WHERE id IN ?`, worker, lease.Microseconds(), ids).Error
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	for i := range rows {
		rows[i].Status = outbox.StatusPublishing
		rows[i].ClaimVersion++
		rows[i].Attempts++
	}
	return rows, nil
}

func (d *mysqlDriver) wakeups(context.Context, *gorm.DB, *slog.Logger) <-chan struct{} { return nil }
func (d *mysqlDriver) notify(*gorm.DB)                                                 {}
func (d *mysqlDriver) analyze(context.Context, *gorm.DB) error                         { return nil }
func (d *mysqlDriver) concurrentWriters() bool                                         { return true }
func (d *mysqlDriver) returning() bool                                                 { return false }

// sqliteDriver claims with one UPDATE … RETURNING: SQLite runs one writer
// at a time, so the statement is atomic, and a single statement takes the
// write lock at once (no deferred-transaction upgrade to fail).
type sqliteDriver struct{ table string }

func (d *sqliteDriver) claim(ctx context.Context, db *gorm.DB, worker string, limit int, lease time.Duration) ([]outbox.OutboxEvent, error) {
	now := time.Now()
	k := dialect.SQLite
	q := `UPDATE ` + d.table + `
		SET status = 'publishing', locked_by = ?, locked_until = ?,
		    claim_version = claim_version + 1, attempts = attempts + 1
		WHERE id IN (
			SELECT e.id FROM ` + d.table + ` e
			WHERE e.status IN ('pending', 'failed') AND e.available_at <= ? AND ` + claimable(d.table) + `
			ORDER BY e.available_at, e.id
			LIMIT ?)
		RETURNING ` + claimColumns
	rows, err := db.WithContext(ctx).Raw(q, worker, k.Time(now.Add(lease)), k.Time(now), limit).Rows()
	if err != nil {
		return nil, err
	}
	return scanClaimed(rows)
}

func (d *sqliteDriver) wakeups(context.Context, *gorm.DB, *slog.Logger) <-chan struct{} { return nil }
func (d *sqliteDriver) notify(*gorm.DB)                                                 {}
func (d *sqliteDriver) analyze(context.Context, *gorm.DB) error                         { return nil }
func (d *sqliteDriver) concurrentWriters() bool                                         { return false }
func (d *sqliteDriver) returning() bool                                                 { return true }
