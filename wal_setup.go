package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
)

// WALStatusTable returns the table in which the streaming relay of a WAL
// mode records how far it got (the outbox table's name and "_wal"):
// created by MigrateWAL, read by relay.Inspector's stats.
func WALStatusTable(table string) string { return table + "_wal" }

// MigrateWAL sets up WAL mode for the outbox table of the Plugin installed
// on db (DefaultTableName without one), after Migrate's tables: the
// publication w.Publication of the table's inserts, then the logical
// replication slot w.Slot (pgoutput), and the table the streaming relay
// records its progress in (WALStatusTable). Existing ones are kept. It
// fails, naming the fix, on a database that is not PostgreSQL 14 or later
// or whose wal_level is not logical.
//
// Creating a slot waits for the transactions running at that moment to
// end. Migrate calls MigrateWAL itself when db's Plugin has WAL set (and
// not Drain).
//
// Call it before db.Use of a Plugin in WAL mode, which refuses a server
// without the slot (a refused Plugin is not installed): on a db without a
// Plugin it sets up the default table, after Migrate has created it.
// Plugin.Migrate sets up the table of any Plugin, installed or not.
func MigrateWAL(db *gorm.DB, w WAL) error {
	table := DefaultTableName
	if p, err := Lookup(db); err == nil {
		table = p.Table()
	}
	return migrateWAL(db, table, w)
}

// migrateWAL is MigrateWAL for table.
func migrateWAL(db *gorm.DB, table string, w WAL) error {
	if k, err := dialect.Of(db); err != nil || k != dialect.Postgres {
		return fmt.Errorf("%w: WAL mode needs PostgreSQL 14 or later", ErrWALNotReady)
	}
	slot, pub, err := w.names(table)
	if err != nil {
		return err
	}
	db = db.Session(&gorm.Session{NewDB: true})
	var level string
	var version int
	if err := db.Raw(`SELECT current_setting('wal_level'), current_setting('server_version_num')::int`).Row().Scan(&level, &version); err != nil {
		return fmt.Errorf("outbox: migrate WAL: %w", err)
	}
	if err := walServerReady(version, level); err != nil {
		return fmt.Errorf("outbox: migrate WAL: %w", err)
	}
	// The publication first: pgoutput looks it up as of each decoded
	// change, and refuses changes older than the publication.
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + WALStatusTable(table) + ` (
			slot VARCHAR(63) PRIMARY KEY,
			streamer VARCHAR(128) NOT NULL DEFAULT '',
			confirmed_lsn pg_lsn,
			oldest_unconfirmed_at TIMESTAMPTZ,
			updated_at TIMESTAMPTZ NOT NULL DEFAULT now())`,
		`DO $$ BEGIN
			IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = '` + pub + `') THEN
				CREATE PUBLICATION ` + pub + ` FOR TABLE ` + table + ` WITH (publish = 'insert');
			END IF;
		END $$`,
		`SELECT pg_create_logical_replication_slot('` + slot + `', 'pgoutput')
			WHERE NOT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = '` + slot + `')`,
	}
	for _, s := range stmts {
		if err := db.Exec(s).Error; err != nil && !alreadyExists(err) {
			return fmt.Errorf("outbox: migrate WAL (slot %s, publication %s): %w", slot, pub, err)
		}
	}
	return nil
}

// alreadyExists reports a duplicate_object error: another process created
// the slot or the publication at the same moment.
func alreadyExists(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42710"
}

// DropWAL drops the replication slot and the publication of w, and the
// status table, for the outbox table of the Plugin installed on db: the
// last step of switching back to table mode, once the slot holds nothing
// more to stream (events it still holds are lost). A slot still in use
// by a streaming relay is retried for 10 seconds.
func DropWAL(ctx context.Context, db *gorm.DB, w WAL) error {
	table := DefaultTableName
	if p, err := Lookup(db); err == nil {
		table = p.Table()
	}
	slot, pub, err := w.names(table)
	if err != nil {
		return err
	}
	db = db.Session(&gorm.Session{NewDB: true}).WithContext(ctx)
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = db.Exec(`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = ?`, slot).Error
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "55006" || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond) // its walsender is still exiting
	}
	if err != nil {
		return fmt.Errorf("outbox: dropping the slot %s: %w", slot, err)
	}
	for _, s := range []string{`DROP PUBLICATION IF EXISTS ` + pub, `DROP TABLE IF EXISTS ` + WALStatusTable(table)} {
		if err := db.Exec(s).Error; err != nil {
			return fmt.Errorf("outbox: drop WAL: %w", err)
		}
	}
	return nil
}
