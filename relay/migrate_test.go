package relay_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/sqlmigrate"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// Migration 0005 (the claim indexes by partition key) applied by
// outbox.Migrate to a table made by the earlier migrations that already
// holds events in every state: the rows are kept, the indexes are the new
// ones, Migrate is then a no-op, and a relay delivers what is left in
// per-key order.
func TestClaimIndexMigrationOnATableWithRows(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, sqlmigrate.Apply(db, []string{"0001_outbox_events", "0003_outbox_relays"}, nil))
		must(t, db.Use(&outbox.Plugin{}))
		const keys, perKey, unkeyed = 4, 30, 40
		emitN(t, db, keys*perKey+unkeyed, func(i int) outbox.Event {
			e := event(i)
			if i < keys*perKey {
				e.PartitionKey = fmt.Sprint("key-", i%keys)
			}
			return e
		})
		// History and retries: the first event of each key published, the
		// second failed and due; a few events without a key dead.
		must(t, db.Exec("UPDATE outbox_events SET status = 'published', published_at = created_at, attempts = 1 WHERE id <= ?", keys).Error)
		must(t, db.Exec("UPDATE outbox_events SET status = 'failed', attempts = 1 WHERE id > ? AND id <= ?", keys, 2*keys).Error)
		must(t, db.Exec("UPDATE outbox_events SET status = 'dead', attempts = 1 WHERE id > ?", keys*perKey+unkeyed-3).Error)
		before := statusCounts(t, db)

		must(t, outbox.Migrate(db))
		if after := statusCounts(t, db); after != before {
			t.Fatalf("rows per status %v before the migration, %v after", before, after)
		}
		if def := claimIndexDefinition(t, db); !strings.Contains(def, "partition_key") {
			t.Errorf("claim index after the migration: %s", def)
		}
		var applied int64
		must(t, db.Table(sqlmigrate.VersionTable).Where("name = ?", "0005_outbox_claim_by_key").Count(&applied).Error)
		if applied != 1 {
			t.Errorf("0005 recorded %d times", applied)
		}
		must(t, outbox.Migrate(db)) // recorded: not applied again

		tracker := trackOrdered(t, newRecorder())
		want := int64(keys*(perKey-1) + unkeyed - 3)
		runRelays(t, db, 2, tracker, time.Minute, func() bool {
			return countStatus(t, db, outbox.StatusPublished) == int64(keys)+want
		}, relay.WithBatchSize(16), relay.WithPollInterval(5*time.Millisecond))
		if tracker.starts != int(want) {
			t.Errorf("%d deliveries, want %d", tracker.starts, want)
		}
	})
}

func statusCounts(t *testing.T, db *gorm.DB) string {
	t.Helper()
	var rows []struct {
		Status string
		N      int
	}
	must(t, db.Raw("SELECT status, COUNT(*) AS n FROM outbox_events GROUP BY status ORDER BY status").Scan(&rows).Error)
	return fmt.Sprint(rows)
}

// claimIndexDefinition describes outbox_events_claim_idx.
func claimIndexDefinition(t *testing.T, db *gorm.DB) string {
	t.Helper()
	var def []string
	switch db.Dialector.Name() {
	case "postgres":
		must(t, db.Raw("SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'outbox_events_claim_idx'").Scan(&def).Error)
	case "mysql":
		must(t, db.Raw("SELECT column_name FROM information_schema.statistics WHERE table_schema = DATABASE() AND index_name = 'outbox_events_claim_idx' ORDER BY seq_in_index").Scan(&def).Error)
	default:
		must(t, db.Raw("SELECT sql FROM sqlite_master WHERE name = 'outbox_events_claim_idx'").Scan(&def).Error)
	}
	return strings.Join(def, ", ")
}

// Migrations 0006 (indexes of published and dead events; PostgreSQL drops
// the aggregate index), 0008 (PostgreSQL drops the NOTIFY trigger: the
// INSERT notifies) and 0009 (PostgreSQL drops the CHECK on status) applied by outbox.Migrate to a table made by the
// earlier migrations that already holds events in every state: the rows
// are kept, retention deletes the old published ones through the new
// index, and a relay delivers what is left.
func TestLeanIndexMigrationOnATableWithRows(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, sqlmigrate.Apply(db, []string{"0001_outbox_events", "0003_outbox_relays", "0004_outbox_relays_publisher", "0005_outbox_claim_by_key"},
			map[string]string{outbox.DefaultTableName: outbox.DefaultTableName}))
		must(t, db.Use(&outbox.Plugin{}))
		emitN(t, db, 60, func(i int) outbox.Event {
			e := event(i)
			if i%3 == 0 {
				e.PartitionKey = fmt.Sprint("key-", i%6)
			}
			return e
		})
		// Old and recent history, and dead events.
		must(t, db.Exec("UPDATE outbox_events SET status = 'published', published_at = ?, attempts = 1 WHERE id <= 10",
			time.Now().Add(-48*time.Hour).UTC()).Error)
		must(t, db.Exec("UPDATE outbox_events SET status = 'published', published_at = created_at, attempts = 1 WHERE id > 10 AND id <= 20").Error)
		must(t, db.Exec("UPDATE outbox_events SET status = 'dead', attempts = 1 WHERE id > 55").Error)
		before := statusCounts(t, db)

		must(t, outbox.Migrate(db))
		if after := statusCounts(t, db); after != before {
			t.Fatalf("rows per status %v before the migration, %v after", before, after)
		}
		for _, name := range []string{"0006_outbox_lean_indexes", "0008_outbox_notify_inline", "0009_outbox_status_check"} {
			var applied int64
			must(t, db.Table(sqlmigrate.VersionTable).Where("name = ?", name).Count(&applied).Error)
			if applied != 1 {
				t.Errorf("%s recorded %d times", name, applied)
			}
		}
		if db.Dialector.Name() == "postgres" {
			// 0008: the INSERT notifies; the trigger and its function are gone.
			var left []string
			must(t, db.Raw(`SELECT trigger_name FROM information_schema.triggers WHERE trigger_schema = current_schema()
				UNION ALL SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema()`).Scan(&left).Error)
			if len(left) != 0 {
				t.Errorf("triggers and functions left after 0008: %v", left)
			}
			// 0009: no CHECK constraint, which PostgreSQL compiles for
			// every INSERT.
			var checks []string
			must(t, db.Raw(`SELECT conname FROM pg_constraint WHERE contype = 'c' AND conrelid = 'outbox_events'::regclass`).Scan(&checks).Error)
			if len(checks) != 0 {
				t.Errorf("CHECK constraints left after 0009: %v", checks)
			}
		}
		must(t, outbox.Migrate(db)) // recorded: not applied again

		pub := newRecorder()
		runRelays(t, db, 1, pub, time.Minute, func() bool {
			// 10 recent + 35 delivered now; the 10 old ones deleted.
			return countStatus(t, db, outbox.StatusPublished) == 10+35 && countStatus(t, db, outbox.StatusPending) == 0
		}, relay.WithPollInterval(5*time.Millisecond))
		if n := countStatus(t, db, outbox.StatusDead); n != 5 {
			t.Errorf("%d dead events after the relay ran, want the 5 dead before", n)
		}
		var old int64
		must(t, db.Table("outbox_events").Where("id <= 10").Count(&old).Error)
		if old != 0 {
			t.Errorf("%d events published 48h ago are left; retention should have deleted them", old)
		}
	})
}
