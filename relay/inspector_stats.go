package relay

import (
	"context"
	"fmt"
	"time"

	"github.com/gormoutbox/outbox"
)

// publishedExactLimit is the most published events Stats counts one by
// one where the database keeps a row estimate (PostgreSQL); beyond it the
// published count is the estimate.
const publishedExactLimit = 10000

// statusSQL is each status as an SQL literal.
var statusSQL = map[outbox.Status]string{
	outbox.StatusPending: "'pending'", outbox.StatusPublishing: "'publishing'", outbox.StatusPublished: "'published'",
	outbox.StatusFailed: "'failed'", outbox.StatusDead: "'dead'",
}

// Stats describes an outbox table.
type Stats struct {
	// Counts has the number of events per status (absent: none). Every
	// count but the published one is exact.
	Counts map[outbox.Status]int64
	// PublishedEstimated reports that Counts[outbox.StatusPublished] is
	// an estimate: the table holds more than 10,000 published events and
	// the database keeps a row estimate (PostgreSQL's pg_class.reltuples,
	// refreshed by autovacuum), from which the other counts are taken.
	// Counting a large history exactly would read all of it.
	PublishedEstimated bool
	// OldestPendingAge is how long the oldest deliverable pending event
	// has waited (zero when none waits): the relays' lag.
	OldestPendingAge time.Duration
	// Relays lists the relays that recorded heartbeats, live and stale.
	Relays []RelayStatus
	// WAL is the health of the table's replication slot in WAL mode
	// (outbox.WAL), nil where there is none (see InspectWAL).
	WAL *WALStats
}

// stats counts the relay's table, without the heartbeats (for gauges).
func (r *Relay) stats(ctx context.Context) (*Stats, error) {
	return (&ops{db: r.db.WithContext(ctx), kind: r.kind, table: r.table}).stats()
}

// stats counts each status through the partial indexes that hold it (the
// predicates of migrations 0005 and 0006, written out so that every
// planner matches them): unkeyed pending and failed events from the claim
// index, keyed unfinished ones from the key index, unkeyed publishing
// ones from the lease index, dead ones from the dead index, published
// ones from the published index (or an estimate).
func (o *ops) stats() (*Stats, error) {
	s := &Stats{Counts: make(map[outbox.Status]int64, 5)}
	var others int64
	// One statement each: small, never planned in parallel, and the
	// single-status ones name their status so that the count needs only
	// the index.
	for _, q := range []string{
		"SELECT status, COUNT(*) AS n FROM " + o.table + " WHERE status IN ('pending', 'failed') AND partition_key = '' GROUP BY status",
		"SELECT status, COUNT(*) AS n FROM " + o.table + " WHERE status IN " + unfinishedIn + " AND partition_key <> '' GROUP BY status",
		"SELECT 'publishing' AS status, COUNT(*) AS n FROM " + o.table + " WHERE status = 'publishing' AND partition_key = ''",
		"SELECT 'dead' AS status, COUNT(*) AS n FROM " + o.table + " WHERE status = 'dead'",
	} {
		var counts []struct {
			Status outbox.Status
			N      int64
		}
		if err := o.db.Raw(q).Scan(&counts).Error; err != nil {
			return nil, fmt.Errorf("relay: counting events: %w", err)
		}
		for _, c := range counts {
			s.Counts[c.Status] += c.N
			others += c.N
		}
	}
	if err := o.countPublished(s, others); err != nil {
		return nil, err
	}
	for st, n := range s.Counts {
		if n == 0 {
			delete(s.Counts, st)
		}
	}
	age, err := o.oldestPendingAge()
	if err != nil {
		return nil, err
	}
	s.OldestPendingAge = age
	return s, nil
}

// countPublished sets s's published count: exact up to
// publishedExactLimit, an estimate beyond where the database has one,
// exact otherwise. others is the count of the other statuses.
func (o *ops) countPublished(s *Stats, others int64) error {
	est, ok, err := o.kind.Driver().EstimatedRows(o.db, o.table)
	if err != nil {
		return fmt.Errorf("relay: estimating the events: %w", err)
	}
	limit := ""
	if ok {
		limit = fmt.Sprintf(" LIMIT %d", publishedExactLimit+1)
	}
	var n int64
	q := "SELECT COUNT(*) FROM (SELECT 1 AS one FROM " + o.table + " WHERE status = 'published'" + limit + ") p"
	if err := o.db.Raw(q).Scan(&n).Error; err != nil {
		return fmt.Errorf("relay: counting published events: %w", err)
	}
	if ok && n > publishedExactLimit {
		n, s.PublishedEstimated = max(est-others, n), true
	}
	s.Counts[outbox.StatusPublished] = n
	return nil
}

// oldestPendingAge measures the wait of the oldest deliverable pending
// event, unkeyed ones from the claim index, keyed ones from the key index.
func (o *ops) oldestPendingAge() (time.Duration, error) {
	now, nowArgs := o.kind.Now()
	t := o.table
	q := "SELECT " + o.kind.SecondsSince("MIN(a)") + " FROM (" +
		"SELECT MIN(available_at) AS a FROM " + t + " WHERE status IN ('pending', 'failed') AND partition_key = ''" +
		" AND status = 'pending' AND available_at <= (SELECT " + now + ")" +
		" UNION ALL SELECT MIN(available_at) AS a FROM " + t + " WHERE status IN " + unfinishedIn + " AND partition_key <> ''" +
		" AND status = 'pending' AND available_at <= (SELECT " + now + ")) m"
	var age *float64
	if err := o.db.Raw(q, append(append([]any{}, nowArgs...), nowArgs...)...).Scan(&age).Error; err != nil {
		return 0, fmt.Errorf("relay: measuring the oldest pending event: %w", err)
	}
	if age == nil || *age <= 0 {
		return 0, nil
	}
	return time.Duration(*age * float64(time.Second)), nil
}
