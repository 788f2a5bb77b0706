package main

import (
	"strings"
	"testing"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// outbox migrate --wal refuses a server that cannot run WAL mode, naming
// the fix (the shared test server runs with wal_level replica), and
// SQLite; stats reports no slot where there is none. The CLI's WAL mode on
// a server with wal_level=logical is tested in tests/walbrokers
// (TestWALCLI), which starts one.
func TestMigrateWALRefused(t *testing.T) {
	for _, d := range []string{testenv.Postgres, testenv.SQLite} {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			r := cmd(t, u, "migrate", "--wal")
			var level string
			if d == testenv.Postgres {
				db.Raw(`SELECT current_setting('wal_level')`).Scan(&level)
			}
			want := "wal_level = logical"
			switch {
			case d == testenv.SQLite:
				want = "PostgreSQL 14"
			case level == "logical":
				t.Skip("the test server runs with wal_level=logical")
			}
			if r.code == 0 || !strings.Contains(r.stderr, want) {
				t.Errorf("migrate --wal: exit %d, stderr %q; want a refusal naming %q", r.code, r.stderr, want)
			}
			if s := cmd(t, u, "stats", "--json").ok(t).stdout; strings.Contains(s, `"wal"`) {
				t.Errorf("stats reports a WAL slot where there is none: %s", s)
			}
		})
	}
}
