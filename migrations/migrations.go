// Package migrations holds the versioned SQL that creates gorm-outbox's
// tables, one directory per dialect: postgres, mysql (MySQL 8 and MariaDB)
// and sqlite. Each version has an .up.sql and a .down.sql file, named as
// golang-migrate expects, so the directories can be handed to a migration
// tool as they are. outbox.Migrate applies the same files (all of them:
// the idempotency table too); idempotency.Migrate applies 0002 to an
// idempotency table of another name.
//
// outbox.Migrate and idempotency.Migrate record each file they applied, per
// table, in the table gorm_outbox_migrations, and apply only the missing
// ones. Files 0001 to 0003 are idempotent (installations from before that
// table existed run them again harmlessly); later files may change a schema
// and run once. On MySQL, whose DDL commits itself, a later file must be a
// single statement (or idempotent), so that a failure leaves nothing half
// applied.
//
// The files name the default tables (outbox_events, outbox_idempotency).
// Migrate substitutes a custom table name; a migration tool does not, so
// edit copies of the files when the defaults do not suit.
package migrations

import "embed"

// FS holds every migration file, at "<dialect>/<version>_<name>.<up|down>.sql".
//
//go:embed postgres/*.sql mysql/*.sql sqlite/*.sql
var FS embed.FS
