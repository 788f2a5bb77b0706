package sqldriver

import (
	"strings"
	"time"

	"gorm.io/gorm"
)

// AttemptsTable returns the attempt log table of the outbox table named
// table (migration 0007).
func AttemptsTable(table string) string { return table + "_attempts" }

// AttemptRecord is one record of the attempt log: how one claim of an
// event ended.
type AttemptRecord struct {
	// EventRowID is the event's row id (outbox_events.id).
	EventRowID int64
	EventID    string
	// RelayID is the relay (worker id) that recorded the outcome.
	RelayID string
	// Attempt is the event's attempts count of the claim (from 1).
	Attempt int
	// ClaimVersion is the claim's version, as the claim left it: one
	// record per claim.
	ClaimVersion int64
	// Outcome is published, retried, dead, snoozed, unavailable, released
	// or rescued.
	Outcome string
	// Duration is how long the delivery took (0 when none ran).
	Duration time.Duration
	// Error is the delivery's error text, nil for none.
	Error *string
	// Receipt is where the publisher delivered the event (relay.SetReceipt),
	// nil for none (migration 0010).
	Receipt *string
	// StatusAfter and VersionAfter are the status and claim_version the
	// completion gives the row: a driver that cannot tell which rows an
	// UPDATE changed reads them (Complete).
	StatusAfter  string
	VersionAfter int64
}

// CompleteParams are the parameters of AttemptLog.Complete.
type CompleteParams struct {
	// Table is the outbox table; the records go to AttemptsTable(Table).
	Table string
	// Update is a conditional UPDATE of Table (no RETURNING) with its
	// arguments, that gives each row it updates its record's StatusAfter
	// and VersionAfter.
	Update string
	Args   []any
	// Records has one record per row the update may change, by
	// EventRowID.
	Records []AttemptRecord
}

// AttemptLog is the SQL of the relay's attempt log (relay.WithAttemptLog):
// the records written with a completion, in the same statement or
// transaction, so that a record exists exactly when its outcome does.
type AttemptLog interface {
	// Complete runs p.Update and inserts the record of each row it
	// changed, atomically (one statement, or one transaction), and returns
	// the ids of the rows whose outcome is recorded: every row the update
	// changed and, where the database cannot tell which those are (no
	// RETURNING), rows already in the state the update gives them under the
	// same claim (recorded by an earlier try whose answer was lost), never
	// a row the update's condition refused. A record of a claim already
	// logged (same event_row_id and claim_version) is skipped.
	Complete(db *gorm.DB, p CompleteParams) ([]int64, error)
	// InsertAttempts inserts recs into AttemptsTable(table) through tx in
	// one statement, skipping records of a claim already logged.
	InsertAttempts(tx *gorm.DB, table string, recs []AttemptRecord) error
}

// AttemptColumns are the columns of the attempt log an insert writes.
const AttemptColumns = "event_row_id, event_id, relay_id, attempt, claim_version, outcome, duration_us, error, receipt, created_at"

// AttemptInsert describes a dialect's multi-row insert of attempt records.
type AttemptInsert struct {
	// Clock binds created_at.
	Clock Clock
	// Conflict is the clause that skips a record of a claim already
	// logged.
	Conflict string
}

// Values writes "(?, …, now), …" for recs into sb and returns the
// arguments appended to args.
func (ins AttemptInsert) Values(sb *strings.Builder, args []any, recs []AttemptRecord) []any {
	now, nowArgs := ins.Clock.Now()
	for i := range recs {
		r := &recs[i]
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, " + now + ")")
		args = append(args, r.EventRowID, r.EventID, r.RelayID, r.Attempt, r.ClaimVersion, r.Outcome,
			r.Duration.Microseconds(), r.Error, r.Receipt)
		args = append(args, nowArgs...)
	}
	return args
}

// Exec inserts recs into AttemptsTable(table) through tx in one
// statement.
func (ins AttemptInsert) Exec(tx *gorm.DB, table string, recs []AttemptRecord) error {
	if len(recs) == 0 {
		return nil
	}
	var sb strings.Builder
	sb.WriteString("INSERT INTO " + AttemptsTable(table) + " (" + AttemptColumns + ") VALUES ")
	args := ins.Values(&sb, make([]any, 0, len(recs)*10), recs)
	sb.WriteString(ins.Conflict)
	return tx.Exec(sb.String(), args...).Error
}

// Applied returns the records of recs whose EventRowID is among ids.
func Applied(recs []AttemptRecord, ids []int64) []AttemptRecord {
	in := make(map[int64]bool, len(ids))
	for _, id := range ids {
		in[id] = true
	}
	out := make([]AttemptRecord, 0, len(ids))
	for _, r := range recs {
		if in[r.EventRowID] {
			out = append(out, r)
		}
	}
	return out
}
