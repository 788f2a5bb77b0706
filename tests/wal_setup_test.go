package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
)

// walAccount is an aggregate that records its events.
type walAccount struct {
	ID    uint `gorm:"primaryKey"`
	Owner string
	outbox.Recorder
}

// openPlain opens dsn without the outbox plugin, closed when t ends.
func openPlain(t *testing.T, dsn string) *gorm.DB {
	t.Helper()
	db, err := gorm.Open(postgres.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	return db
}

// WAL mode without its slot, on a server with wal_level=logical: db.Use
// refuses, and an application that goes on with db anyway writes no event
// that no slot keeps. A test_decoding slot created beforehand sees the
// Create of a Recorder model as its business row and no logical decoding
// message (before the fix, the refused Plugin's callbacks stayed on db and
// wrote the event as a message: 1 message, lost, since the relay's slot
// did not exist).
func TestWALRefusedUseWritesNothing(t *testing.T) {
	t.Parallel()
	pg := startPostgresWAL(t)
	db := openPlain(t, pg.DSN())
	if err := db.AutoMigrate(&walAccount{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Exec(`SELECT pg_create_logical_replication_slot('probe', 'test_decoding')`).Error; err != nil {
		t.Fatal(err)
	}
	err := db.Use(&outbox.Plugin{WAL: &outbox.WAL{}})
	if !errors.Is(err, outbox.ErrWALNotReady) || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("Use in WAL mode without the slot: %v, want a refusal naming the missing slot", err)
	}
	err = db.Transaction(func(tx *gorm.DB) error {
		acc := walAccount{Owner: "ada"}
		acc.Record(outbox.Event{Type: "account.opened"})
		return tx.Create(&acc).Error
	})
	if err != nil {
		t.Fatalf("Create after the refused Use: %v", err)
	}
	var changes []string
	if err := db.Raw(`SELECT data FROM pg_logical_slot_get_changes('probe', NULL, NULL)`).Scan(&changes).Error; err != nil {
		t.Fatal(err)
	}
	messages, inserts := 0, 0
	for _, c := range changes {
		switch {
		case strings.HasPrefix(c, "message:"):
			messages++
		case strings.Contains(c, "wal_accounts: INSERT:"):
			inserts++
		}
	}
	if messages != 0 || inserts != 1 {
		t.Errorf("the Create after a refused Use wrote %d message(s) and %d row(s), want 0 and 1:\n%s",
			messages, inserts, strings.Join(changes, "\n"))
	}
}

// A refusal of db.Use for want of the slot names the ways to create it,
// and each works when followed to the letter, with the same Plugin, on a
// server with wal_level=logical: the next db.Use succeeds, and an event
// emitted then is kept by the slot (read back with pgoutput). Before the
// fix the refusal said "run outbox.Migrate", which on a db whose Use was
// refused creates the tables only (shown here as the control of the
// default table's case).
func TestWALRefusalAdviceWorks(t *testing.T) {
	t.Parallel()
	pg := startPostgresWAL(t)
	cases := []struct {
		name, advice string
		plugin       *outbox.Plugin
		follow       func(t *testing.T, db *gorm.DB, p *outbox.Plugin, refusal string)
	}{
		{"Plugin.Migrate", "call its Migrate method (p.Migrate(db))",
			&outbox.Plugin{TableName: "pm_events", WAL: &outbox.WAL{}},
			func(t *testing.T, db *gorm.DB, p *outbox.Plugin, _ string) { must(t, p.Migrate(db)) }},
		{"AutoMigrate", "set its AutoMigrate",
			&outbox.Plugin{TableName: "am_events", WAL: &outbox.WAL{Slot: "am_slot", Publication: "am_pub"}},
			func(t *testing.T, db *gorm.DB, p *outbox.Plugin, _ string) { p.AutoMigrate = true }},
		{"Migrate then MigrateWAL", "call outbox.Migrate(db) then outbox.MigrateWAL(db, w) with the Plugin's WAL w",
			&outbox.Plugin{WAL: &outbox.WAL{}},
			func(t *testing.T, db *gorm.DB, p *outbox.Plugin, _ string) {
				must(t, outbox.Migrate(db))
				if err := db.Use(p); !errors.Is(err, outbox.ErrWALNotReady) {
					t.Errorf("Use after outbox.Migrate alone: %v, want still refused (no Plugin installed, no slot)", err)
				}
				must(t, outbox.MigrateWAL(db, *p.WAL))
			}},
		{"CLI", "run `outbox migrate --wal --table cli_events --wal-slot cli_slot`",
			&outbox.Plugin{TableName: "cli_events", WAL: &outbox.WAL{Slot: "cli_slot"}},
			func(t *testing.T, db *gorm.DB, p *outbox.Plugin, refusal string) { runAdvisedCLI(t, pg.DSN(), refusal) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			db := openPlain(t, pg.DSN())
			err := db.Use(c.plugin)
			if !errors.Is(err, outbox.ErrWALNotReady) || !strings.Contains(err.Error(), c.advice) {
				t.Fatalf("Use without the slot: %v\nwant a refusal advising %q", err, c.advice)
			}
			c.follow(t, db, c.plugin, err.Error())
			if err := db.Use(c.plugin); err != nil {
				t.Fatalf("Use after following the advice %q: %v", c.advice, err)
			}
			must(t, db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{Type: "advice.followed"}) }))
			setup, _ := outbox.WALOf(db)
			if n := slotMessages(t, db, setup.Slot, setup.Publication, "advice.followed"); n != 1 {
				t.Errorf("the slot %s holds %d message(s) of the event, want 1", setup.Slot, n)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// slotMessages counts the logical decoding messages of type typ that the
// slot holds, read (not consumed) through pgoutput with publication pub.
func slotMessages(t *testing.T, db *gorm.DB, slot, pub, typ string) int {
	t.Helper()
	var n int
	err := db.Raw(`SELECT count(*) FROM pg_logical_slot_peek_binary_changes(?, NULL, NULL,
			'proto_version', '1', 'publication_names', ?, 'messages', 'true')
		WHERE get_byte(data, 0) = ascii('M') AND position(convert_to(?, 'UTF8') IN data) > 0`,
		slot, pub, `"type":"`+typ+`"`).Scan(&n).Error
	if err != nil {
		t.Fatalf("reading the slot %s: %v", slot, err)
	}
	return n
}

// runAdvisedCLI runs the `outbox …` command a refusal advises, built from
// cmd/outbox, on dsn.
func runAdvisedCLI(t *testing.T, dsn, refusal string) {
	t.Helper()
	_, rest, ok := strings.Cut(refusal, "run `outbox ")
	args, _, closed := strings.Cut(rest, "`")
	if !ok || !closed {
		t.Fatalf("no `outbox …` command in %q", refusal)
	}
	bin := filepath.Join(t.TempDir(), "outbox")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("..", "cmd", "outbox")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the CLI: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, strings.Fields(args)...)
	cmd.Env = append(os.Environ(), "OUTBOX_DB="+dsn)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("outbox %s: %v\n%s", args, err, out)
	}
}
