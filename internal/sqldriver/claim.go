package sqldriver

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// ClaimParams are the parameters of Claimer.Claim.
type ClaimParams struct {
	Table string
	// Worker is stored in locked_by.
	Worker string
	// Limit is the most events to claim (at least 1).
	Limit int
	// Heads is the most partition keys the claim takes runs of (0, or more
	// than Limit: Limit). Fewer keys with longer runs make a batch of deep
	// per-key backlogs cheaper to claim: the walk over the keys costs an
	// index descent per key, a run's next event a step along the index.
	Heads int
	// Lease sets locked_until to now plus Lease, by the database clock.
	Lease time.Duration
	// Cursor is the last partition key the caller's previous claim took:
	// the walk over the keys starts after it and wraps around, so that
	// every key gets its turn however many there are ("" starts at the
	// first key).
	Cursor string
	// LazyCommit makes the claim commit without waiting for the disk,
	// where the dialect can (Statements.LazyCommit).
	LazyCommit bool
}

// MaxHeads returns the most keys the claim takes: Heads, bounded by
// Limit (Limit when Heads is 0).
func (p ClaimParams) MaxHeads() int {
	if p.Heads <= 0 || p.Heads > p.Limit {
		return p.Limit
	}
	return p.Heads
}

// ClaimedEvent is an event as a claim returns it: after the claim
// (status publishing, claim_version and attempts bumped), its times as
// the database driver scanned them (see Clock.StoredTime).
type ClaimedEvent struct {
	ID                                   int64
	EventID, Type                        string
	Version                              int
	TenantID, AggregateType, AggregateID string
	PartitionKey, Topic                  string
	Payload, Headers                     []byte
	Attempts, MaxAttempts                int
	ClaimVersion                         int64
	AvailableAt, CreatedAt               time.Time
}

// Claimer is the relay's claim, and what the relay may assume of the
// database around it.
type Claimer interface {
	// Claim marks up to p.Limit claimable events (pending or failed, and
	// available) as publishing by p.Worker for p.Lease, bumping
	// claim_version and attempts, and returns them as they are after the
	// claim. Concurrent claims never take the same event, and never wait
	// for each other's locked rows (SKIP LOCKED). It takes events without
	// a key oldest first, and of each partition key the head run: its
	// oldest unfinished event when that one is claimable, and the
	// claimable events that follow it up to the first that is not, at
	// most ceil(limit/heads) per key, heads the claimable heads found,
	// at most p.MaxHeads(). A key whose oldest unfinished event
	// is publishing is skipped. The batch is filled by position in run
	// (every head and every event without a key, oldest first, then every
	// run's second event, …).
	Claim(ctx context.Context, db *gorm.DB, p ClaimParams) ([]ClaimedEvent, error)
	// Returning reports whether UPDATE … RETURNING is available.
	Returning() bool
	// ConcurrentWriters reports whether a batch's completion can run while
	// the next batch is claimed (false: the database has one writer).
	ConcurrentWriters() bool
	// Listens reports whether the database can wake a relay when events
	// commit (LISTEN/NOTIFY).
	Listens() bool
}

// ClaimColumns are the columns a claim returns, in the order ScanClaimed
// reads them.
const ClaimColumns = "id, event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, attempts, max_attempts, claim_version, available_at, created_at"

// KeyedUnfinished is the predicate of the key index on databases with
// partial indexes: a query must state it for the index to serve.
const KeyedUnfinished = `status IN ('pending', 'publishing', 'failed') AND partition_key <> ''`

// ScanClaimed reads rows of ClaimColumns and closes them. It scans by hand
// rather than through GORM's reflection: the claim is on the relay's hot
// path.
func ScanClaimed(rows *sql.Rows) ([]ClaimedEvent, error) {
	defer rows.Close()
	var out []ClaimedEvent
	for rows.Next() {
		e, err := ScanEvent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// ScanEvent scans the current row, of ClaimColumns and then the columns
// extra points to.
func ScanEvent(rows *sql.Rows, extra ...any) (ClaimedEvent, error) {
	var (
		e         ClaimedEvent
		available AnyTime
		created   AnyTime
	)
	dest := []any{&e.ID, &e.EventID, &e.Type, &e.Version, &e.TenantID, &e.AggregateType, &e.AggregateID,
		&e.PartitionKey, &e.Topic, &e.Payload, &e.Headers, &e.Attempts, &e.MaxAttempts, &e.ClaimVersion,
		&available, &created}
	if err := rows.Scan(append(dest, extra...)...); err != nil {
		return e, err
	}
	e.AvailableAt, e.CreatedAt = available.T, created.T
	return e, nil
}

// AnyTime scans a time whichever way the database driver returns it: a
// time.Time, or text (MySQL without parseTime, SQLite without a declared
// type).
type AnyTime struct{ T time.Time }

var textTimeLayouts = []string{
	"2006-01-02 15:04:05.999999999-07:00",
	"2006-01-02 15:04:05.999999999",
	time.RFC3339Nano,
}

// Scan implements sql.Scanner.
func (a *AnyTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		a.T = time.Time{}
		return nil
	case time.Time:
		a.T = x
		return nil
	case []byte:
		return a.parse(string(x))
	case string:
		return a.parse(x)
	}
	return fmt.Errorf("cannot scan %T as a time", v)
}

func (a *AnyTime) parse(s string) error {
	for _, layout := range textTimeLayouts {
		if t, err := time.ParseInLocation(layout, s, time.UTC); err == nil {
			a.T = t
			return nil
		}
	}
	return fmt.Errorf("cannot parse %q as a time", s)
}
