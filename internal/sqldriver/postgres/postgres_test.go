package postgres_test

import (
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
	"github.com/gormoutbox/outbox/internal/sqldriver/drivertest"
	"github.com/gormoutbox/outbox/internal/sqldriver/postgres"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func TestConformance(t *testing.T) {
	drivertest.Exercise(t, postgres.Driver{}, func(t *testing.T) *gorm.DB { return testenv.Open(t, testenv.Postgres) })
}

// Retention reads the published index (migration 0006), not the table: on
// a table holding a large young history it deletes the few old rows
// without a sequential scan.
func TestDeletePublishedReadsTheIndex(t *testing.T) {
	db := testenv.Open(t, testenv.Postgres)
	drivertest.Migrate(t, postgres.Driver{}, db)
	must(t, db.Exec(`INSERT INTO outbox_events (event_id, type, status, published_at, created_at)
		SELECT 'ev-' || g, 't', CASE WHEN g % 50 = 0 THEN 'dead' ELSE 'published' END,
		       now() - CASE WHEN g <= 5 THEN interval '3 hours' ELSE interval '1 minute' END, now() - interval '4 hours'
		FROM generate_series(1, 20000) g`).Error)
	must(t, db.Exec("ANALYZE outbox_events").Error)
	must(t, db.Transaction(func(tx *gorm.DB) error {
		// The view counts the backend's scans not yet reported (the
		// migration's CREATE INDEX scanned the table): compare.
		rowsRead := func() (n int64) {
			must(t, tx.Raw("SELECT seq_tup_read + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables WHERE relid = ?::regclass",
				drivertest.Table).Scan(&n).Error)
			return n
		}
		before := rowsRead()
		found, deleted, err := postgres.Driver{}.DeletePublished(t.Context(), tx, sqldriver.DeletePublishedParams{
			Table: drivertest.Table, OlderThan: time.Hour, Limit: 100})
		if err != nil || found != 5 || deleted != 5 {
			t.Fatalf("DeletePublished = %d found, %d deleted, %v; want 5, 5", found, deleted, err)
		}
		if read := rowsRead() - before; read > 100 {
			t.Errorf("retention read %d rows to delete 5; want it to read the published index's old entries only", read)
		}
		return nil
	}))
}

// LazyCommit turns synchronous_commit off for the transaction that
// evaluates it, and for nothing else: the session's setting is the same
// after it.
func TestLazyCommitIsTransactionLocal(t *testing.T) {
	db := testenv.Open(t, testenv.Postgres)
	conn, err := db.DB()
	must(t, err)
	conn.SetMaxOpenConns(1) // one session: what one statement sets, the next sees
	setting := func(tx *gorm.DB) (s string) {
		must(t, tx.Raw("SELECT current_setting('synchronous_commit')").Scan(&s).Error)
		return s
	}
	if s := setting(db); s != "on" {
		t.Skipf("the server's synchronous_commit is %q", s)
	}
	must(t, db.Transaction(func(tx *gorm.DB) error {
		var one int
		must(t, tx.Raw("SELECT 1 WHERE "+postgres.Driver{}.LazyCommit()).Scan(&one).Error)
		if s := setting(tx); s != "off" {
			t.Errorf("synchronous_commit in the transaction = %q, want off", s)
		}
		return nil
	}))
	var one int
	must(t, db.Raw("SELECT 1 WHERE "+postgres.Driver{}.LazyCommit()).Scan(&one).Error)
	if s := setting(db); s != "on" {
		t.Errorf("synchronous_commit after the transactions = %q, want on (the session's)", s)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
