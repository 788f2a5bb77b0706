package sqlmigrate_test

import (
	"sync"
	"testing"
	"testing/fstest"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqlmigrate"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// files holds an idempotent first migration and a schema change that fails
// when it runs twice (ALTER TABLE … ADD COLUMN has no IF NOT EXISTS on
// MySQL 8 or SQLite), for every dialect.
func files() fstest.MapFS {
	fsys := fstest.MapFS{}
	for _, d := range testenv.Dialects {
		fsys[d+"/0001_things.up.sql"] = &fstest.MapFile{Data: []byte(
			"-- the table\nCREATE TABLE IF NOT EXISTS things (id INTEGER NOT NULL PRIMARY KEY);\n")}
		fsys[d+"/0002_things_name.up.sql"] = &fstest.MapFile{Data: []byte(
			"ALTER TABLE things ADD COLUMN name VARCHAR(20) NOT NULL DEFAULT '';\n")}
	}
	return fsys
}

var names = []string{"0001_things", "0002_things_name"}

// Each file runs once per target, however often and however concurrently
// Apply runs, and an installation that predates the version table (the
// first, idempotent file already applied by hand) is brought up to date.
func TestApplyRunsEachFileOnce(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		fsys := files()
		// An installation from before the version table existed.
		if err := db.Exec("CREATE TABLE things (id INTEGER NOT NULL PRIMARY KEY)").Error; err != nil {
			t.Fatal(err)
		}
		if err := db.Exec("INSERT INTO things (id) VALUES (1)").Error; err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() { errs <- sqlmigrate.ApplyFS(db, fsys, names, nil) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("concurrent Apply: %v", err)
			}
		}
		if err := sqlmigrate.ApplyFS(db, fsys, names, nil); err != nil {
			t.Fatalf("Apply again: %v", err)
		}
		var rows []struct {
			ID   int
			Name string
		}
		if err := db.Raw("SELECT id, name FROM things").Scan(&rows).Error; err != nil {
			t.Fatalf("the schema change was not applied: %v", err)
		}
		if len(rows) != 1 || rows[0].ID != 1 {
			t.Fatalf("rows %+v, want the existing row kept", rows)
		}
		var recorded int64
		if err := db.Table(sqlmigrate.VersionTable).Where("target = ?", "0001_things").Count(&recorded).Error; err != nil {
			t.Fatal(err)
		}
		if recorded != 2 {
			t.Fatalf("%d migrations recorded, want 2", recorded)
		}
	})
}

// A renamed target gets its own copy of every file, recorded apart.
func TestApplyPerTarget(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		fsys := files()
		for _, table := range []string{"things", "other_things", "things"} {
			if err := sqlmigrate.ApplyFS(db, fsys, names, map[string]string{"things": table}); err != nil {
				t.Fatalf("%s: %v", table, err)
			}
		}
		for _, table := range []string{"things", "other_things"} {
			if err := db.Exec("INSERT INTO " + table + " (id, name) VALUES (1, 'x')").Error; err != nil {
				t.Fatalf("%s: %v", table, err)
			}
		}
	})
}
