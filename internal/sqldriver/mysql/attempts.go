package mysql

import (
	"database/sql"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// attempts inserts attempt records; a record of a claim already logged
// (the unique key on event_row_id and claim_version) is skipped.
var attempts = sqldriver.AttemptInsert{Clock: Driver{}, Conflict: Driver{}.InsertIgnore("event_row_id")}

// Complete runs the update and the insert of its records in one
// transaction. Without RETURNING, the rows it changed are every row when
// it changed as many as there are records (the common case); otherwise
// they are read back in the transaction: a row in the state its record
// says the update gives it was changed by it or, with the same
// claim_version, by an earlier try whose answer was lost (whose records
// exist, and are skipped). READ COMMITTED, like the claim: the read sees
// the latest rows, and the insert takes no gap locks.
func (Driver) Complete(db *gorm.DB, p sqldriver.CompleteParams) ([]int64, error) {
	var ids []int64
	err := db.Transaction(func(tx *gorm.DB) error {
		ids = ids[:0]
		res := tx.Exec(p.Update, p.Args...)
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected == int64(len(p.Records)) {
			for i := range p.Records {
				ids = append(ids, p.Records[i].EventRowID)
			}
		} else if err := changed(tx, p, &ids); err != nil {
			return err
		}
		return attempts.Exec(tx, p.Table, sqldriver.Applied(p.Records, ids))
	}, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// changed appends to ids the rows of p's records that are in the state
// their record says the update gives them.
func changed(tx *gorm.DB, p sqldriver.CompleteParams, ids *[]int64) error {
	want := make(map[int64]*sqldriver.AttemptRecord, len(p.Records))
	all := make([]int64, len(p.Records))
	for i := range p.Records {
		want[p.Records[i].EventRowID] = &p.Records[i]
		all[i] = p.Records[i].EventRowID
	}
	var now []struct {
		ID           int64
		ClaimVersion int64
		Status       string
	}
	if err := tx.Raw("SELECT id, claim_version, status FROM "+p.Table+" WHERE id IN ?", all).Scan(&now).Error; err != nil {
		return err
	}
	for _, row := range now {
		if r := want[row.ID]; r.VersionAfter == row.ClaimVersion && r.StatusAfter == row.Status {
			*ids = append(*ids, row.ID)
		}
	}
	return nil
}

// InsertAttempts inserts the records in one statement.
func (Driver) InsertAttempts(tx *gorm.DB, table string, recs []sqldriver.AttemptRecord) error {
	return attempts.Exec(tx, table, recs)
}
