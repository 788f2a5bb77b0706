package outbox

import (
	"strings"
	"testing"
)

// The refusals of db.Use in WAL mode name only fixes that work after a
// refused Use: the Plugin's own AutoMigrate or Migrate method, for the
// default table outbox.Migrate then MigrateWAL, and the CLI with the flags
// of the table and slot when it can create them (it names no publication
// of its own). tests/TestWALRefusalAdviceWorks follows each on a server.
func TestWALRefusalNamesWorkingFixes(t *testing.T) {
	pgoutput, lost := "pgoutput", "lost"
	always := []string{"before db.Use", "set its AutoMigrate", "p.Migrate(db)"}
	cases := []struct {
		name             string
		st               walState
		table, slot, pub string
		want, notWant    []string
	}{
		{"no slot, defaults", walState{}, DefaultTableName, "outbox_events_wal", "outbox_events_wal",
			[]string{"slot outbox_events_wal does not exist", "outbox.MigrateWAL(db, w)", "run `outbox migrate --wal`"}, nil},
		{"no slot, another table and slot", walState{}, "orders_outbox", "orders_slot", "orders_slot",
			[]string{"run `outbox migrate --wal --table orders_outbox --wal-slot orders_slot`"}, []string{"MigrateWAL"}},
		{"no slot, another publication", walState{}, "orders_outbox", "orders_outbox_wal", "orders_pub",
			nil, []string{"outbox migrate", "MigrateWAL"}},
		{"no publication", walState{Plugin: &pgoutput, SameDB: true}, DefaultTableName, "s", "s",
			[]string{"publication s does not exist", "run `outbox migrate --wal --wal-slot s`"}, nil},
		{"slot lost", walState{Plugin: &pgoutput, SameDB: true, HasPub: true, Status: &lost}, "t_events", "t_events_wal", "t_events_wal",
			[]string{"invalidated", "pg_drop_replication_slot('t_events_wal')", "`outbox migrate --drop-wal --table t_events`",
				"run `outbox migrate --wal --table t_events`"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.st.Version, c.st.WALLevel = 150000, "logical"
			err := c.st.ready(c.table, c.slot, c.pub)
			if err == nil {
				t.Fatal("ready: nil, want a refusal")
			}
			for _, w := range append(always, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q does not name %q", err, w)
				}
			}
			for _, w := range append(c.notWant, "run outbox.Migrate") {
				if strings.Contains(err.Error(), w) {
					t.Errorf("refusal %q names %q, which would not work", err, w)
				}
			}
		})
	}
}
