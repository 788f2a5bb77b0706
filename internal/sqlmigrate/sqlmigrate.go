// Package sqlmigrate applies gorm-outbox's embedded SQL migrations.
//
// Each migration file is applied once per target table and recorded in
// VersionTable. The first files (up to 0003) are idempotent, so an
// installation made before VersionTable existed runs them again harmlessly
// and records them; later files may change a schema (ALTER TABLE) and run
// exactly once.
package sqlmigrate

import (
	"fmt"
	"io/fs"
	"strings"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/sqldriver"
	"github.com/gormoutbox/outbox/migrations"
)

// VersionTable records which migration files were applied, per target
// table (a migration of a renamed table is recorded under its new name).
const VersionTable = "gorm_outbox_migrations"

// Read returns the statements of the up migration named name (such as
// "0001_outbox_events") for dialect, with every occurrence of each key of
// rename replaced by its value.
func Read(dialect, name string, rename map[string]string) ([]string, error) {
	return read(migrations.FS, dialect, name, rename)
}

func read(fsys fs.FS, dialect, name string, rename map[string]string) ([]string, error) {
	b, err := fs.ReadFile(fsys, dialect+"/"+name+".up.sql")
	if err != nil {
		return nil, fmt.Errorf("reading migration %s/%s: %w", dialect, name, err)
	}
	text := string(b)
	for from, to := range rename {
		if from != to {
			text = strings.ReplaceAll(text, from, to)
		}
	}
	return Split(text), nil
}

// Apply runs, in order, those of the up migrations names that were not
// applied to db yet, and records each in VersionTable. Concurrent callers
// (replicas starting with AutoMigrate) are serialised by the dialect's
// driver (sqldriver.Migration): on PostgreSQL all files run in one
// transaction under an advisory lock; on MySQL, whose DDL commits itself,
// each file runs under a named lock (GET_LOCK) and is recorded right
// after it succeeded; on SQLite in one transaction.
func Apply(db *gorm.DB, names []string, rename map[string]string) error {
	return ApplyFS(db, migrations.FS, names, rename)
}

// ApplyFS is Apply with the migration files read from fsys, laid out as
// package migrations lays them out ("<dialect>/<name>.up.sql").
func ApplyFS(db *gorm.DB, fsys fs.FS, names []string, rename map[string]string) error {
	drv, err := dialect.Open(db)
	if err != nil {
		return err
	}
	return ApplyDriver(db, drv, fsys, names, rename)
}

// ApplyDriver is ApplyFS through drv, db's driver: drv serialises the
// migrators (sqldriver.Migration) and names the folder of the files.
func ApplyDriver(db *gorm.DB, drv sqldriver.Driver, fsys fs.FS, names []string, rename map[string]string) error {
	m := &migrator{fsys: fsys, drv: drv, names: names, rename: rename, target: target(names, rename)}
	return drv.LockMigrations(db, m.run)
}

type migrator struct {
	fsys   fs.FS
	drv    sqldriver.Driver
	names  []string
	rename map[string]string
	target string
}

// target names what the migrations apply to: the renamed table, or the
// first file's default table.
func target(names []string, rename map[string]string) string {
	for from, to := range rename {
		if from != "" {
			return to
		}
	}
	if len(names) > 0 {
		return names[0]
	}
	return ""
}

// run applies the missing migrations through db, which holds the lock.
func (m *migrator) run(db *gorm.DB) error {
	if err := db.Exec(m.drv.VersionTableSQL(VersionTable)).Error; err != nil {
		return fmt.Errorf("creating %s: %w", VersionTable, err)
	}
	var done []string
	if err := db.Raw("SELECT name FROM "+VersionTable+" WHERE target = ?", m.target).Scan(&done).Error; err != nil {
		return fmt.Errorf("reading %s: %w", VersionTable, err)
	}
	applied := make(map[string]bool, len(done))
	for _, n := range done {
		applied[n] = true
	}
	for _, name := range m.names {
		if applied[name] {
			continue
		}
		stmts, err := read(m.fsys, m.drv.Name(), name, m.rename)
		if err != nil {
			return err
		}
		for _, s := range stmts {
			if err := db.Exec(s).Error; err != nil {
				return fmt.Errorf("migration %s/%s: %w", m.drv.Name(), name, err)
			}
		}
		if err := db.Exec("INSERT INTO "+VersionTable+" (target, name) VALUES (?, ?)", m.target, name).Error; err != nil {
			return fmt.Errorf("recording migration %s/%s: %w", m.drv.Name(), name, err)
		}
	}
	return nil
}

// Split cuts a SQL file into statements at semicolons that end a line,
// except inside dollar-quoted ($$) bodies. Comment-only lines are dropped.
func Split(text string) []string {
	var (
		out    []string
		cur    strings.Builder
		inBody bool
	)
	for line := range strings.SplitSeq(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if !inBody && (trimmed == "" || strings.HasPrefix(trimmed, "--")) {
			continue
		}
		if strings.Count(line, "$$")%2 == 1 {
			inBody = !inBody
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if !inBody && strings.HasSuffix(trimmed, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
