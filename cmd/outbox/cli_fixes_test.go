package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// openTable opens the CLI address u with the outbox plugin on table.
func openTable(t *testing.T, u, table string) *gorm.DB {
	t.Helper()
	addr, err := parseDB(u, "")
	if err != nil {
		t.Fatal(err)
	}
	db, err := addr.open(context.Background(), false)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	if err := db.Use(&outbox.Plugin{TableName: table}); err != nil {
		t.Fatal(err)
	}
	return db
}

// A table name with capitals works on every database (issue 8): on
// PostgreSQL the unquoted name folds to lower case, and the CLI's table
// check used the catalog's exact spelling.
func TestMixedCaseTable(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, _ := cliDB(t, d)
			cmd(t, u, "migrate", "--table", "OrderEvents").ok(t)
			emit(t, openTable(t, u, "OrderEvents"), "m1", "m2")
			stats := decodeJSON[statsJSON](t, cmd(t, u, "stats", "--table", "OrderEvents", "--json").ok(t).stdout)
			if stats.Counts["pending"] != 2 {
				t.Errorf("stats: %+v", stats)
			}
			r := cmd(t, u, "dispatch-once", "--table", "OrderEvents", "--to", "stdout").ok(t)
			if n := strings.Count(r.stdout, "\n"); n != 2 {
				t.Errorf("dispatch-once delivered %d events, want 2:\n%s%s", n, r.stdout, r.stderr)
			}
			cmd(t, u, "dead", "list", "--table", "OrderEvents").ok(t)
			cmd(t, u, "purge", "--table", "OrderEvents", "--older-than", "1h").ok(t)
		})
	}
}

// A mistyped SQLite path is an error naming it, and creates no file;
// migrate creates the file.
func TestSQLiteFileMustExist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "typo.db")
	for _, args := range [][]string{{"stats"}, {"dead", "list"}, {"dispatch-once", "--to", "stdout"}, {"purge", "--older-than", "1h"}} {
		r := cmd(t, "sqlite:"+path, args...)
		if r.code == 0 || !strings.Contains(r.stderr, path) || !strings.Contains(r.stderr, "does not exist") {
			t.Errorf("outbox %v on a missing file: exit %d, %q", args, r.code, r.stderr)
		}
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("outbox %v created %s", args, path)
		}
	}
	cmd(t, "sqlite:"+path, "migrate").ok(t)
	cmd(t, "sqlite:"+path, "stats").ok(t)
}

// Each command's --help lists its own flags only: dispatch-once runs one
// batch, so the flags of the long-running relay are not its own.
func TestHelpListsOwnFlags(t *testing.T) {
	relayOnly := []string{"-poll-interval", "-retention", "-no-listen"}
	r := cmd(t, "", "dispatch-once", "--help").ok(t)
	for _, flag := range relayOnly {
		if strings.Contains(r.stdout, flag) {
			t.Errorf("dispatch-once --help lists %s:\n%s", flag, r.stdout)
		}
	}
	r = cmd(t, "", "relay", "--help").ok(t)
	for _, flag := range relayOnly {
		if !strings.Contains(r.stdout, flag) {
			t.Errorf("relay --help does not list %s", flag)
		}
	}
}

// dead list cuts long errors; --wide prints them whole, on one line.
func TestDeadListWide(t *testing.T) {
	u, db := cliDB(t, testenv.SQLite)
	cmd(t, u, "migrate").ok(t)
	emit(t, db, "d1")
	long := "first line\n" + strings.Repeat("x", 200) + " THE-END"
	if err := db.Exec("UPDATE outbox_events SET status = 'dead', last_error = ? WHERE event_id = 'd1'", long).Error; err != nil {
		t.Fatal(err)
	}
	if r := cmd(t, u, "dead", "list").ok(t); strings.Contains(r.stdout, "THE-END") {
		t.Errorf("dead list printed the whole error:\n%s", r.stdout)
	}
	r := cmd(t, u, "dead", "list", "--wide").ok(t)
	if !strings.Contains(r.stdout, `first line\n`+strings.Repeat("x", 200)+" THE-END") {
		t.Errorf("dead list --wide:\n%s", r.stdout)
	}
}
