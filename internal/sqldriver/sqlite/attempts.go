package sqlite

import (
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// attempts inserts attempt records; a record of a claim already logged is
// skipped.
var attempts = sqldriver.AttemptInsert{Clock: Driver{}, Conflict: Driver{}.InsertIgnore("event_row_id, claim_version")}

// Complete runs the update with RETURNING id and the insert of the
// records of the rows it returned in one transaction (SQLite has no
// data-modifying WITH), and returns those ids.
func (Driver) Complete(db *gorm.DB, p sqldriver.CompleteParams) ([]int64, error) {
	var ids []int64
	err := db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Raw(p.Update+" RETURNING id", p.Args...).Scan(&ids).Error; err != nil {
			return err
		}
		return attempts.Exec(tx, p.Table, sqldriver.Applied(p.Records, ids))
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// InsertAttempts inserts the records in one statement.
func (Driver) InsertAttempts(tx *gorm.DB, table string, recs []sqldriver.AttemptRecord) error {
	return attempts.Exec(tx, table, recs)
}
