package postgres

import (
	"strings"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// attempts inserts attempt records; a record of a claim already logged is
// skipped.
var attempts = sqldriver.AttemptInsert{Clock: Driver{}, Conflict: Driver{}.InsertIgnore("event_row_id, claim_version")}

// attemptValues types the first row of a VALUES list: PostgreSQL would
// take untyped parameters for text.
const attemptValues = "CAST(? AS bigint), CAST(? AS text), CAST(? AS text), CAST(? AS integer), CAST(? AS bigint), " +
	"CAST(? AS text), CAST(? AS bigint), CAST(? AS text), CAST(? AS text), "

// Complete runs the update and the insert of its records in one
// statement, a data-modifying WITH: the records of the rows the update
// returned, joined by id. It returns the ids the update returned.
func (Driver) Complete(db *gorm.DB, p sqldriver.CompleteParams) ([]int64, error) {
	var sb strings.Builder
	sb.WriteString("WITH done AS (" + p.Update + " RETURNING id), logged AS (INSERT INTO " +
		sqldriver.AttemptsTable(p.Table) + " (" + sqldriver.AttemptColumns + ") SELECT v.event_row_id, v.event_id, v.relay_id, " +
		"v.attempt, v.claim_version, v.outcome, v.duration_us, v.error, v.receipt, v.created_at FROM (VALUES ")
	var vals strings.Builder
	args := attempts.Values(&vals, append(make([]any, 0, len(p.Args)+len(p.Records)*10), p.Args...), p.Records)
	// Cast the first row's parameters; the other rows take its types.
	sb.WriteString(strings.Replace(vals.String(), "(?, ?, ?, ?, ?, ?, ?, ?, ?, ", "("+attemptValues, 1))
	sb.WriteString(") AS v (event_row_id, event_id, relay_id, attempt, claim_version, outcome, duration_us, error, receipt, created_at) " +
		"JOIN done ON done.id = v.event_row_id" + attempts.Conflict + ") SELECT id FROM done")
	var ids []int64
	if err := db.Raw(sb.String(), args...).Scan(&ids).Error; err != nil {
		return nil, err
	}
	return ids, nil
}

// InsertAttempts inserts the records in one statement.
func (Driver) InsertAttempts(tx *gorm.DB, table string, recs []sqldriver.AttemptRecord) error {
	return attempts.Exec(tx, table, recs)
}
