// Package migrations holds the versioned SQL that creates gorm-outbox's
// tables, one directory per dialect: postgres, mysql (MySQL 8 and MariaDB)
// and sqlite. Each version has an .up.sql and a .down.sql file, named as
// golang-migrate expects, so the directories can be handed to a migration
// tool as they are; outbox.Migrate and idempotency.Migrate apply the same
// files.
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
