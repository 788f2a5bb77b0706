package outbox_test

import (
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	mysqldriver "gorm.io/driver/mysql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/sqlmigrate"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/migrations"
)

// outbox.Migrate and the SQL files, run as a migration tool runs them (each
// file whole, through the driver), create the same tables and indexes, and
// the GORM model maps every column.
func TestMigrateMatchesSQLFiles(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			viaMigrate := testenv.Open(t, d)
			must(t, outbox.Migrate(viaMigrate))

			// Every file of the dialect: Migrate creates every table.
			viaFiles := openMultiStatement(t, d)
			ups, err := fs.Glob(migrations.FS, d+"/*.up.sql")
			must(t, err)
			if len(ups) < 3 {
				t.Fatalf("only %v", ups)
			}
			for _, name := range ups {
				up, err := fs.ReadFile(migrations.FS, name)
				must(t, err)
				must(t, viaFiles.Exec(string(up)).Error)
			}

			a, b := schemaOf(t, viaMigrate, d, false), schemaOf(t, viaFiles, d, false)
			if !slices.Equal(a, b) {
				t.Errorf("Migrate and the SQL file disagree:\nMigrate:\n  %s\nfile:\n  %s", strings.Join(a, "\n  "), strings.Join(b, "\n  "))
			}
			want := []string{"outbox_events_claim_idx", "outbox_events_key_idx", "outbox_events_published_idx", "outbox_events_event_id_key", "outbox_idempotency_expires_idx"}
			if d == testenv.Postgres {
				// Migration 0006: every UPDATE of a PostgreSQL row writes an
				// entry into each index over all rows; nothing on an
				// event's way reads the aggregate index.
				if slices.ContainsFunc(a, func(s string) bool { return strings.Contains(s, "outbox_events_aggregate_idx") }) {
					t.Error("the aggregate index is still there on PostgreSQL")
				}
			} else {
				want = append(want, "outbox_events_aggregate_idx")
			}
			for _, want := range want {
				if !slices.ContainsFunc(a, func(s string) bool { return strings.Contains(s, want) }) {
					t.Errorf("index %s is missing", want)
				}
			}

			// The model maps exactly the table's columns.
			stmt := &gorm.Statement{DB: viaMigrate}
			must(t, stmt.Parse(&outbox.OutboxEvent{}))
			cols, err := viaMigrate.Migrator().ColumnTypes(outbox.DefaultTableName)
			must(t, err)
			var names []string
			for _, c := range cols {
				names = append(names, c.Name())
			}
			slices.Sort(names)
			fields := slices.Sorted(slices.Values(stmt.Schema.DBNames))
			if !slices.Equal(names, fields) {
				t.Errorf("table columns %v\nmodel fields  %v", names, fields)
			}

			// The down migrations remove everything.
			for _, name := range slices.Backward(ups) {
				down, err := fs.ReadFile(migrations.FS, strings.TrimSuffix(name, ".up.sql")+".down.sql")
				must(t, err)
				must(t, viaFiles.Exec(string(down)).Error)
			}
			if rest := schemaOf(t, viaFiles, d, true); len(rest) > 0 {
				t.Errorf("the down migrations left %v", rest)
			}
		})
	}
}

// openMultiStatement opens a fresh database whose driver runs a whole
// migration file in one Exec, as migration tools do.
func openMultiStatement(t *testing.T, d string) *gorm.DB {
	if d != testenv.MySQL {
		return testenv.Open(t, d)
	}
	cfg, err := mysql.ParseDSN(testenv.DSN(t, d))
	must(t, err)
	cfg.MultiStatements = true
	db, err := gorm.Open(mysqldriver.Open(cfg.FormatDSN()), testenv.Config())
	must(t, err)
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

var autoIncrementRE = regexp.MustCompile(` AUTO_INCREMENT=\d+`)

// schemaOf describes the outbox tables, indexes and triggers as sorted text.
func schemaOf(t *testing.T, db *gorm.DB, d string, mayBeEmpty bool) []string {
	t.Helper()
	var out []string
	switch d {
	case testenv.Postgres:
		var fns []string
		must(t, db.Raw(`SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = current_schema()`).Scan(&fns).Error)
		out = append(out, fns...)
		must(t, db.Raw(`SELECT column_name || ' ' || data_type || ' ' || coalesce(character_maximum_length::text, '') || ' ' || is_nullable || ' ' || coalesce(column_default, '')
			FROM information_schema.columns WHERE table_schema = current_schema() AND table_name LIKE 'outbox%'`).Scan(&out).Error)
		var more []string
		must(t, db.Raw(`SELECT replace(indexdef, current_schema() || '.', '') FROM pg_indexes WHERE schemaname = current_schema() AND tablename LIKE 'outbox%'
			UNION ALL SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace JOIN pg_class r ON r.oid = c.conrelid WHERE n.nspname = current_schema() AND r.relname <> '`+sqlmigrate.VersionTable+`'
			UNION ALL SELECT trigger_name || ' ' || action_timing || ' ' || event_manipulation || ' ' || action_statement FROM information_schema.triggers WHERE trigger_schema = current_schema()`).Scan(&more).Error)
		out = append(out, more...)
	case testenv.MySQL:
		var tables []string
		must(t, db.Raw("SHOW TABLES").Scan(&tables).Error)
		for _, tbl := range tables {
			if tbl == sqlmigrate.VersionTable {
				continue
			}
			var name, create string
			must(t, db.Raw("SHOW CREATE TABLE "+tbl).Row().Scan(&name, &create))
			out = append(out, strings.Split(autoIncrementRE.ReplaceAllString(create, ""), "\n")...)
		}
	case testenv.SQLite:
		must(t, db.Raw(`SELECT type || ' ' || name || ' ' || coalesce(sql, '') FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' AND tbl_name <> ?`, sqlmigrate.VersionTable).Scan(&out).Error)
	}
	if len(out) == 0 && !mayBeEmpty {
		t.Fatalf("no schema found on %s", d)
	}
	slices.Sort(out)
	return out
}
