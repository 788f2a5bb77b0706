package relay

import (
	"fmt"
	"sync"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// The attempt log (WithAttemptLog): a record per claim that ended, written
// with the completion that records the claim's outcome (sqldriver.AttemptLog),
// so that fencing governs both: an outcome refused leaves no record.

// Outcomes of the attempt log (Attempt.Outcome).
const (
	// AttemptPublished: the event was delivered and marked published.
	AttemptPublished = "published"
	// AttemptRetried: the delivery failed; another attempt follows.
	AttemptRetried = "retried"
	// AttemptDead: no attempts left, or a permanent failure.
	AttemptDead = "dead"
	// AttemptSnoozed: the handler asked for a later delivery
	// (outbox.Snooze); no attempt spent.
	AttemptSnoozed = "snoozed"
	// AttemptUnavailable: the publisher's transport was down
	// (outbox.Unavailable); no attempt spent.
	AttemptUnavailable = "unavailable"
	// AttemptReleased: handed back undelivered (the relay was stopping, or
	// an earlier event of its key was not published); no attempt spent.
	AttemptReleased = "released"
	// AttemptRescued: the claim's lease expired without an outcome (its
	// relay crashed or stalled); a rescue scheduled another attempt.
	AttemptRescued = "rescued"
)

// attemptOutcome names o's outcome in the attempt log.
func attemptOutcome(o *outcome) string {
	switch o.kind {
	case published:
		return AttemptPublished
	case failed:
		if o.expired {
			return AttemptRescued
		}
		return AttemptRetried
	case dead:
		return AttemptDead
	}
	switch {
	case o.err != nil && isSnoozed(o.err):
		return AttemptSnoozed
	case outbox.IsUnavailable(o.err):
		return AttemptUnavailable
	}
	return AttemptReleased
}

// attemptRecords returns the attempt log records of outs, completed with
// fence f.
func (r *Relay) attemptRecords(outs []outcome, f fence) []sqldriver.AttemptRecord {
	recs := make([]sqldriver.AttemptRecord, len(outs))
	for i := range outs {
		o := &outs[i]
		rec := sqldriver.AttemptRecord{EventRowID: o.row.ID, EventID: o.row.EventID, RelayID: r.cfg.workerID,
			Attempt: o.row.Attempts, ClaimVersion: o.row.ClaimVersion, Outcome: attemptOutcome(o), Duration: o.took,
			StatusAfter: string(statusAfter(o)), VersionAfter: o.row.ClaimVersion}
		if f == fenceExpired {
			rec.VersionAfter++
		}
		if o.err != nil {
			s := errorText(o.err)
			rec.Error = &s
		}
		if o.receipt != "" {
			rec.Receipt = &o.receipt
		}
		recs[i] = rec
	}
	return recs
}

// applyLogged is applyChunk with the attempt log: the completion sql and
// the records of outs run together through the dialect's
// sqldriver.AttemptLog.
func (r *Relay) applyLogged(db *gorm.DB, outs []outcome, f fence, retry bool, pos map[int64]int, applied []bool, sql string, args []any) error {
	ids, err := r.kind.Driver().Complete(db, sqldriver.CompleteParams{Table: r.table, Update: sql, Args: args, Records: r.attemptRecords(outs, f)})
	if err != nil {
		return err
	}
	for _, id := range ids {
		applied[pos[id]] = true
	}
	if len(ids) == len(outs) || f != fenceMine || !retry {
		return nil
	}
	// The try before may have committed, records included, without its
	// answer reaching the relay.
	return r.confirm(db, outs, pos, applied)
}

// checkReceiptColumn returns an error wrapping outbox.ErrNotMigrated when
// the attempt log table has no receipt column (migration 0010), nil when
// it has.
func checkReceiptColumn(db *gorm.DB, table string) error {
	var probe []struct{ Receipt *string }
	err := db.Session(&gorm.Session{NewDB: true}).Raw("SELECT receipt FROM " + table + " WHERE 1 = 0").Scan(&probe).Error
	if err != nil {
		return fmt.Errorf("relay: %w: the attempt log table %s has no receipt column (migration 0010): run outbox.Migrate (or `outbox migrate`): %v",
			outbox.ErrNotMigrated, table, err)
	}
	return nil
}

// attemptTableRecheck is how often a missing attempt log table is looked
// up again (a migration may create it while the process runs).
const attemptTableRecheck = time.Minute

// attemptTable is the attempt log table of an outbox table: whether this
// relay writes it, and whether it exists (retention and purges delete
// records with their events whoever wrote them).
type attemptTable struct {
	kind   dialect.Kind
	name   string
	writes bool

	mu      sync.Mutex
	exists  bool
	checked time.Time
}

func newAttemptTable(kind dialect.Kind, table string, writes bool) *attemptTable {
	// A relay that writes the log checked at New that the table exists.
	return &attemptTable{kind: kind, name: sqldriver.AttemptsTable(table), writes: writes, exists: writes}
}

// logged returns the table when this relay writes the attempt log, "" if
// not.
func (a *attemptTable) logged() string {
	if a == nil || !a.writes {
		return ""
	}
	return a.name
}

// existing returns the table if it exists, "" if not: it looks the table
// up, again at most every attemptTableRecheck while it is missing.
func (a *attemptTable) existing(db *gorm.DB) string {
	if a == nil {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.exists && time.Since(a.checked) >= attemptTableRecheck {
		a.checked = time.Now()
		ok, err := a.kind.Driver().TableExists(db, a.name)
		a.exists = err == nil && ok
	}
	if a.exists {
		return a.name
	}
	return ""
}
