package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

var binary string

func TestMain(m *testing.M) {
	flag.Parse()
	if w := flag.Lookup("test.fuzzworker"); w != nil && w.Value.String() == "true" {
		os.Exit(m.Run()) // a fuzzing worker runs FuzzCLI in-process only
	}
	dir, err := os.MkdirTemp("", "outbox-cli")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "outbox")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the CLI: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// cmd runs the CLI with args and OUTBOX_DB=dbURL.
func cmd(t *testing.T, dbURL string, args ...string) result {
	t.Helper()
	return cmdEnv(t, []string{"OUTBOX_DB=" + dbURL}, args...)
}

// cmdEnv runs the CLI with args and the environment variables env (on top
// of the test's own, OUTBOX_* removed).
func cmdEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, binary, args...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); !slices.Contains([]string{"OUTBOX_DB", "OUTBOX_REDIS", "OUTBOX_AMQP", "OUTBOX_NATS", "OUTBOX_KAFKA"}, k) {
			c.Env = append(c.Env, kv)
		}
	}
	c.Env = append(c.Env, env...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{stdout.String(), stderr.String(), code}
}

func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	return r
}

// cliDB returns a fresh database of the dialect as a CLI URL, and a
// *gorm.DB on it for the test's own writes and checks.
func cliDB(t testing.TB, d string) (string, *gorm.DB) {
	t.Helper()
	dsn := testenv.DSN(t, d)
	var u string
	switch d {
	case testenv.SQLite:
		file, _, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
		u = "sqlite:" + file
	case testenv.Postgres:
		u = dsn
	case testenv.MySQL:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u = fmt.Sprintf("mysql://%s:%s@%s/%s", cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
	}
	addr, err := parseDB(u, "")
	if err != nil {
		t.Fatal(err)
	}
	db, err := addr.open(context.Background(), true)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	if err := db.Use(&outbox.Plugin{}); err != nil {
		t.Fatal(err)
	}
	return u, db
}

func emit(t testing.TB, db *gorm.DB, ids ...string) {
	t.Helper()
	err := db.Transaction(func(tx *gorm.DB) error {
		for _, id := range ids {
			if err := outbox.Emit(tx, outbox.Event{ID: id, Type: "cli.test", Payload: map[string]string{"id": id}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func decodeJSON[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, s)
	}
	return v
}

func TestCommandsEndToEnd(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			cmd(t, u, "migrate").ok(t) // again: nothing to do

			emit(t, db, "a", "b", "c")
			r := cmd(t, u, "dispatch-once", "--to", "stdout", "--json").ok(t)
			// Three events, one CloudEvents JSON line each, then the result.
			lines := strings.SplitN(r.stdout, "\n", 4)
			if len(lines) != 4 {
				t.Fatalf("dispatch-once printed %q", r.stdout)
			}
			for _, l := range lines[:3] {
				if e, err := outbox.DecodeEnvelope([]byte(l)); err != nil || e.Type != "cli.test" {
					t.Errorf("delivered line %s: %v", l, err)
				}
			}
			if res := decodeJSON[map[string]int](t, lines[3]); res["published"] != 3 || res["claimed"] != 3 {
				t.Errorf("dispatch-once result %v", res)
			}

			// Two events die.
			emit(t, db, "d1", "d2")
			if err := db.Exec("UPDATE outbox_events SET status = 'dead', attempts = 3, last_error = 'boom' WHERE event_id IN ('d1', 'd2')").Error; err != nil {
				t.Fatal(err)
			}
			list := decodeJSON[deadListJSON](t, cmd(t, u, "dead", "list", "--json").ok(t).stdout)
			if len(list.Events) != 2 || list.Events[0].EventID != "d1" || list.Events[0].LastError != "boom" || list.NextAfter != 0 {
				t.Errorf("dead list: %+v", list)
			}
			page := decodeJSON[deadListJSON](t, cmd(t, u, "dead", "list", "--json", "--limit", "1").ok(t).stdout)
			if len(page.Events) != 1 || page.NextAfter != page.Events[0].ID {
				t.Errorf("dead list page: %+v", page)
			}

			// Replay is refused without --yes, and changes nothing.
			r = cmd(t, u, "dead", "replay", "--id", "d1")
			if r.code == 0 || !strings.Contains(r.stderr, "--yes") || !strings.Contains(r.stderr, "1 dead event") {
				t.Errorf("replay without --yes: exit %d, %s", r.code, r.stderr)
			}
			if n := status(t, db, "dead"); n != 2 {
				t.Fatalf("%d dead after a refused replay, want 2", n)
			}
			cmd(t, u, "dead", "replay", "--id", "d1", "--yes").ok(t)
			r = cmd(t, u, "dead", "replay", "--all", "--type", "cli.test", "--yes", "--json").ok(t)
			if got := decodeJSON[map[string]int](t, r.stdout); got["replayed"] != 1 {
				t.Errorf("replay --all: %v", got)
			}

			stats := decodeJSON[statsJSON](t, cmd(t, u, "stats", "--json").ok(t).stdout)
			if stats.Counts["published"] != 3 || stats.Counts["pending"] != 2 || stats.Counts["dead"] != 0 || stats.Table != "outbox_events" {
				t.Errorf("stats: %+v", stats)
			}
			if !strings.Contains(cmd(t, u, "stats").ok(t).stdout, "published       3") {
				t.Errorf("stats text output lacks the counts")
			}

			// Purge: published events older than an age; dead only with --dead --yes.
			r = cmd(t, u, "purge", "--older-than", "1h", "--json").ok(t)
			if got := decodeJSON[map[string]int](t, r.stdout); got["published"] != 0 {
				t.Errorf("purged %v of fresh events", got)
			}
			if err := db.Exec("UPDATE outbox_events SET published_at = ? WHERE status = 'published'", longAgo(d)).Error; err != nil {
				t.Fatal(err)
			}
			if r = cmd(t, u, "purge", "--older-than", "1h", "--dead"); r.code != 2 {
				t.Errorf("purge --dead without --yes: exit %d", r.code)
			}
			r = cmd(t, u, "purge", "--older-than", "1h", "--json").ok(t)
			if got := decodeJSON[map[string]int](t, r.stdout); got["published"] != 3 {
				t.Errorf("purge: %v, want 3 published deleted", got)
			}
			if n := status(t, db, "pending"); n != 2 {
				t.Errorf("%d pending after the purge, want 2 (only published ones go)", n)
			}
		})
	}
}

func longAgo(d string) string {
	if d == testenv.SQLite {
		return "2000-01-01 00:00:00.000000000+00:00"
	}
	return "2000-01-01 00:00:00"
}

func status(t *testing.T, db *gorm.DB, s string) int64 {
	t.Helper()
	var n int64
	if err := db.Model(&outbox.OutboxEvent{}).Where("status = ?", s).Count(&n).Error; err != nil {
		t.Fatal(err)
	}
	return n
}

func TestErrorsAreClearAndChangeNothing(t *testing.T) {
	u, db := cliDB(t, testenv.SQLite)
	cmd(t, u, "migrate").ok(t)
	emit(t, db, "x")
	cases := []struct {
		args    []string
		db      string
		code    int
		message string
	}{
		{[]string{"stats"}, "ftp://host/db", 2, `unsupported scheme "ftp"`},
		{[]string{"stats"}, "not a url", 2, "cannot tell which database"},
		{[]string{"stats", "--bogus"}, u, 2, "flag provided but not defined: -bogus"},
		{[]string{"frobnicate"}, u, 2, `unknown command "frobnicate"`},
		{[]string{"dispatch-once"}, u, 2, "--to is required"},
		{[]string{"dispatch-once", "--to", "carrier-pigeon"}, u, 2, "want asynq, stream, amqp, nats, kafka or stdout"},
		{[]string{"dispatch-once", "--to", "stdout", "--batch-size", "0"}, u, 2, "batch size"},
		{[]string{"stats"}, "postgres://admin:hunter2@127.0.0.1:1/app?connect_timeout=2", 1, "cannot reach postgres://admin:xxxxx@127.0.0.1:1/app"},
		{[]string{"stats"}, "mysql://admin:hunter2@127.0.0.1:1/app", 1, "mysql://admin:xxxxx@127.0.0.1:1/app"},
		{[]string{"stats", "--table", "other"}, u, 1, "run 'outbox migrate' first"},
		{[]string{"stats", "--table", "bad;name"}, u, 2, "not a plain SQL identifier"},
		{[]string{"stats"}, "", 2, "pass --db or set OUTBOX_DB"},
	}
	for _, c := range cases {
		r := cmd(t, c.db, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr, c.message) {
			t.Errorf("outbox %v (db %q): exit %d, stderr %q; want exit %d mentioning %q", c.args, c.db, r.code, r.stderr, c.code, c.message)
		}
		if strings.Contains(r.stderr+r.stdout, "hunter2") {
			t.Errorf("outbox %v printed the password", c.args)
		}
	}
	if n := status(t, db, "pending"); n != 1 {
		t.Errorf("the failed commands changed the outbox: %d pending", n)
	}
	for _, name := range []string{"migrate", "relay", "dispatch-once", "stats", "purge"} {
		if r := cmd(t, u, name, "--help"); r.code != 0 || !strings.Contains(r.stdout, "Usage: outbox "+name) {
			t.Errorf("%s --help: exit %d, %q", name, r.code, r.stdout)
		}
	}
	for _, sub := range []string{"list", "replay"} {
		if r := cmd(t, u, "dead", sub, "--help"); r.code != 0 || !strings.Contains(r.stdout, "Usage: outbox dead "+sub) {
			t.Errorf("dead %s --help: exit %d, %q", sub, r.code, r.stdout)
		}
	}
}

// SIGTERM while the relay delivers: it exits within the lease, leaving no
// event publishing.
func TestRelayStopsOnSIGTERM(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			ids := make([]string, 3000)
			for i := range ids {
				ids[i] = fmt.Sprintf("e%05d", i)
			}
			emit(t, db, ids...)
			const lease = 5 * time.Second
			proc := exec.Command(binary, "relay", "--to", "stdout", "--worker-id", "cli-relay", "--lease", lease.String(),
				"--batch-size", "50", "--concurrency", "2")
			proc.Env = append(os.Environ(), "OUTBOX_DB="+u)
			stdout, err := proc.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			proc.Stderr = &stderr
			if err := proc.Start(); err != nil {
				t.Fatal(err)
			}
			lines := bufio.NewScanner(stdout)
			for n := 0; n < 100 && lines.Scan(); n++ { // wait until it delivers
			}
			sent := time.Now()
			if err := proc.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			for lines.Scan() { // drain
			}
			if err := proc.Wait(); err != nil {
				t.Fatalf("relay exited with %v\n%s", err, stderr.String())
			}
			if took := time.Since(sent); took > lease {
				t.Errorf("the relay took %v to stop, longer than its lease", took)
			}
			var publishing int64
			if err := db.Model(&outbox.OutboxEvent{}).Where("status = 'publishing' AND locked_by = 'cli-relay'").Count(&publishing).Error; err != nil {
				t.Fatal(err)
			}
			if publishing != 0 {
				t.Errorf("%d events left publishing by the stopped relay", publishing)
			}
			if !strings.Contains(stderr.String(), "relay stopped") {
				t.Errorf("no clean-stop log line:\n%s", stderr.String())
			}
		})
	}
}

func TestRelayToRedisStream(t *testing.T) {
	addr := testenv.RedisAddr(t)
	u, db := cliDB(t, testenv.SQLite)
	cmd(t, u, "migrate").ok(t)
	emit(t, db, "s1", "s2", "s3")
	stream := testenv.Name("cli-stream")
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { rdb.Del(context.Background(), stream); _ = rdb.Close() })
	cmd(t, u, "dispatch-once", "--to", "stream", "--redis", "redis://"+addr+"/0", "--stream", stream).ok(t)
	if n := rdb.XLen(context.Background(), stream).Val(); n != 3 {
		t.Errorf("the stream has %d entries, want 3", n)
	}
	r := cmd(t, u, "dispatch-once", "--to", "asynq", "--redis", "redis://127.0.0.1:1/0")
	if r.code != 0 {
		t.Errorf("an unreachable Redis is an outage, not a failure of the command: exit %d %s", r.code, r.stderr)
	}
}
