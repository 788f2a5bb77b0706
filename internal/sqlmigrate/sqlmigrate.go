// Package sqlmigrate applies gorm-outbox's embedded SQL migrations.
package sqlmigrate

import (
	"fmt"
	"io/fs"
	"strings"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/migrations"
)

// Read returns the statements of the up migration named name (such as
// "0001_outbox_events") for dialect, with every occurrence of each key of
// rename replaced by its value.
func Read(dialect, name string, rename map[string]string) ([]string, error) {
	b, err := fs.ReadFile(migrations.FS, dialect+"/"+name+".up.sql")
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

// Apply runs the up migrations names, in order, on db. The files are
// idempotent (IF NOT EXISTS, OR REPLACE), so Apply may run on every start.
func Apply(db *gorm.DB, names []string, rename map[string]string) error {
	kind, err := dialect.Of(db)
	if err != nil {
		return err
	}
	run := func(db *gorm.DB) error {
		for _, name := range names {
			stmts, err := Read(kind.String(), name, rename)
			if err != nil {
				return err
			}
			for _, s := range stmts {
				if err := db.Exec(s).Error; err != nil {
					return fmt.Errorf("migration %s/%s: %w", kind, name, err)
				}
			}
		}
		return nil
	}
	switch kind {
	case dialect.MySQL:
		// MySQL commits each DDL statement itself; the files are idempotent
		// and CREATE TABLE IF NOT EXISTS is safe to race.
		return run(db)
	case dialect.SQLite:
		// One transaction: it takes the write lock once and waits for it
		// (busy timeout) instead of failing between two statements.
		return db.Transaction(run)
	}
	// PostgreSQL: DDL is transactional. One transaction, serialised with
	// other migrators (several replicas starting with AutoMigrate), so that
	// concurrent CREATE … IF NOT EXISTS do not collide and the trigger is
	// never seen missing.
	return db.Transaction(func(tx *gorm.DB) error {
		if err := tx.Exec("SELECT pg_advisory_xact_lock(?)", migrateLock).Error; err != nil {
			return fmt.Errorf("migration lock: %w", err)
		}
		return run(tx)
	})
}

// migrateLock is the advisory lock that serialises migrations on PostgreSQL.
const migrateLock int64 = 0x676f726d6f7574 // "gormout"

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
