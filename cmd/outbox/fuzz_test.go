package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// fuzzCommands are the command lines FuzzCLI starts with.
var fuzzCommands = []string{"migrate", "relay", "dispatch-once", "dead list", "dead replay", "dead", "show", "redeliver", "stats", "purge", "admin", "help"}

// unsafeFlags are the flags a fuzzed command line may not set: where the
// command connects or listens (the fuzzer must not create files, reach
// servers or take ports of its choosing), brokers included.
var unsafeFlags = []string{"db", "driver", "listen", "metrics-addr", "redis", "amqp-url", "nats-url", "kafka-brokers", "dead-letters"}

// sanitize drops the unsafe flags (and their values) from args.
func sanitize(args []string) []string {
	out := make([]string, 0, len(args)+2)
	for i := 0; i < len(args); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if strings.HasPrefix(args[i], "-") && contains(unsafeFlags, name) {
			if !hasValue {
				i++
			}
			continue
		}
		out = append(out, args[i])
	}
	if len(out) > 0 && out[0] == "admin" {
		out = append(out, "--listen", "127.0.0.1:0")
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// Any command line, however hostile (NUL bytes, invalid UTF-8, huge
// numbers, control characters in ids, types and flags), exits 0, 1 or 2
// without a panic, and prints no raw control character, on every
// database. The long-running commands (relay, admin) run with their
// context already done.
func FuzzCLI(f *testing.F) {
	urls := map[string]string{}
	for _, d := range testenv.Dialects {
		env := map[string]string{testenv.Postgres: testenv.PostgresEnv, testenv.MySQL: testenv.MySQLEnv}[d]
		if env != "" && os.Getenv(env) == "" && !testenv.Required() {
			continue
		}
		u, db := cliDB(f, d)
		run(context.Background(), []string{"migrate"}, newCLI(nil, &bytes.Buffer{}, &bytes.Buffer{}, func(string) string { return u }))
		insertHostile(f, db, "ok-1\n9999  forged-row")
		emit(f, db, "p1", "p2")
		if err := db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{ID: "bin", Type: "cli.test", Payload: json.RawMessage("\"a\xff\u0085\"")})
		}); err != nil {
			f.Fatal(err)
		}
		urls[d] = u
	}
	for _, seed := range [][]string{
		{"dead", "list"}, {"dead", "list", "--wide"}, {"dead", "list", "--json"}, {"dead", "list", "--type", "\xff\xfe"},
		{"dead", "list", "--limit", "99999999999999999999"}, {"dead", "list", "--after", "-1", "--older-than", "2562048h"},
		{"dead", "replay", "--id", "x", "--id", "x", "--yes"}, {"dead", "replay", "--all", "--type", "\x00", "--yes"},
		{"dead", "replay", "--id", "h2"}, {"dead", "bogus\x1b[2J"}, {"show", "h2"}, {"show", "h2", "--json"},
		{"show", "ok-1\n9999  forged-row"}, {"show", "x\x00y"}, {"show", strings.Repeat("x", 200)}, {"show"},
		{"stats"}, {"stats", "--json"}, {"stats", "--table", "a\x1b"}, {"stats", "--table", "OrderEvents"},
		{"redeliver", "--id", "p1", "--id", "\u202e"}, {"redeliver", "--id", "p1", "--yes", "--json"},
		{"purge", "--older-than", "2562047h"}, {"purge", "--older-than", "9999999999999h"}, {"purge", "--older-than", "-1s"},
		{"purge", "--older-than", "1h", "--dead"}, {"migrate", "--table", "x;y"}, {"migrate", "--idempotency-table", "\x1b"},
		{"dispatch-once", "--to", "stdout"}, {"dispatch-once", "--to", "stdout", "--batch-size", "-1"},
		{"dispatch-once", "--to", "\x1b]0;x\x07"}, {"relay", "--to", "stdout", "--log-format", "json"},
		{"admin", "--prefix", "/\x1b"}, {"admin", "--allow-host", "\u202e"}, {"help", "show"}, {"help"},
		{"\x1b[2Jfrobnicate"}, {"stats", "--\x1b[31mbogus"}, {"stats", "--timeout", "1ns"},
		{"show", "bin", "--json"}, {"dispatch-once", "--to", "stdout", "--json"}, {"dispatch-once", "--to", "amqp", "--amqp-url", "amqp://evil:5672/"},
		{"dispatch-once", "--to", "nats", "--subject", "\x1b"}, {"relay", "--to", "kafka", "--kafka-brokers", "evil:9092", "--kafka-layout", "\x00"},
		{"dead", "list", "--dead-letters", "redis://evil:6379/0?stream=x", "--dead-letters-after", "redis:x=1-0"},
		{"dead", "list", "--dead-letters-after", "x=1", "--json"}, {"dead", "list", "--dead-letters-after", "\x1b[2J=\xff"},
		{"dead", "replay", "--message", "1-0", "--yes"}, {"dead", "replay", "--message", "\x1b[2J", "--from", "\u202e", "--json"},
		{"dead", "replay", "--dead-letters=kafka://evil:9092?topic=x", "--message", "0:1", "--yes"}, {"dead", "replay", "--from", "x", "--id", "p1"},
		{"admin", "--dead-letters", "amqp://u:pw@evil:5672/?queue=q"},
	} {
		// The command is one byte (an index of fuzzCommands, the raw
		// first argument past them), so that mutations keep reaching the
		// commands.
		k := slices.Index(fuzzCommands, seed[0])
		if j := slices.Index(fuzzCommands, "dead "+seed[min(1, len(seed)-1)]); len(seed) > 1 && seed[0] == "dead" && j >= 0 {
			k, seed = j, seed[1:]
		}
		if k < 0 {
			f.Add(uint8(255), strings.Join(seed, "\x1f"))
			continue
		}
		f.Add(uint8(k), strings.Join(seed[1:], "\x1f"))
	}
	f.Fuzz(func(t *testing.T, command uint8, rest string) {
		var args []string
		if rest != "" {
			args = strings.Split(rest, "\x1f")
		}
		if int(command) < len(fuzzCommands) {
			args = append(strings.Fields(fuzzCommands[command]), args...)
		}
		args = sanitize(args)
		for d, u := range urls {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			if len(args) > 0 && (args[0] == "relay" || args[0] == "admin") {
				cancel() // runs until its context ends: at once
			}
			var stdout, stderr bytes.Buffer
			code := run(ctx, args, newCLI(args, &stdout, &stderr, func(k string) string { return map[string]string{"OUTBOX_DB": u}[k] }))
			cancel()
			if code < 0 || code > 2 {
				t.Fatalf("%s: outbox %q exited %d", d, args, code)
			}
			for _, out := range []struct{ name, s string }{{"stdout", stdout.String()}, {"stderr", stderr.String()}} {
				if c, ok := rawControl(out.s); ok {
					t.Fatalf("%s: outbox %q: %s holds the raw control character %q:\n%q", d, args, out.name, c, out.s)
				}
			}
			// A database refusing a value (a data exception) is a parameter
			// that was not checked before the statement.
			for _, refusal := range []string{"SQLSTATE 22", "Error 1366", "Error 1292", "Error 1406"} {
				if strings.Contains(stderr.String(), refusal) {
					t.Fatalf("%s: outbox %q: the database refused a value that was not checked:\n%s", d, args, stderr.String())
				}
			}
			if code == 0 && wantsJSON(args) {
				checkJSONStream(t, d, args, stdout.String())
			}
		}
	})
}

// wantsJSON reports whether args are a command with a JSON output asking
// for it plainly: --json given once, before any "--", no other value of
// it, no help.
func wantsJSON(args []string) bool {
	if len(args) == 0 || !slices.Contains([]string{"dead", "show", "redeliver", "stats", "dispatch-once", "purge"}, args[0]) ||
		(args[0] == "dead" && (len(args) < 2 || (args[1] != "list" && args[1] != "replay"))) {
		return false
	}
	n := 0
	for i, a := range args {
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case a == "--":
			return false
		case a == "--json" || a == "-json":
			// the value of the flag before it?
			if prev := args[i-1]; strings.HasPrefix(prev, "-") && !strings.Contains(prev, "=") && !slices.Contains(boolFlags, strings.TrimLeft(prev, "-")) {
				return false
			}
			n++
		case strings.HasPrefix(a, "-") && (name == "json" || name == "h" || name == "help"):
			return false
		}
	}
	return n == 1
}

// boolFlags are the CLI's flags that take no value.
var boolFlags = []string{"all", "attempt-log", "dead", "json", "no-listen", "read-only", "single-active", "wide", "yes"}

// checkJSONStream fails unless out is a stream of JSON values (what
// --json prints, after the stdout publisher's CloudEvents lines).
func checkJSONStream(t *testing.T, d string, args []string, out string) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	for {
		var v any
		err := dec.Decode(&v)
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("%s: outbox %q printed what is not JSON (%v):\n%q", d, args, err, out)
		}
	}
}

// A command closes the connections it opened when it returns, so that
// commands run in one process (as FuzzCLI runs them) do not pile up
// connections: MariaDB lists none left on the command's database.
func TestCommandsCloseTheirConnections(t *testing.T) {
	u, db := cliDB(t, testenv.MySQL)
	cmd(t, u, "migrate").ok(t)
	var name string
	if err := db.Raw("SELECT DATABASE()").Scan(&name).Error; err != nil {
		t.Fatal(err)
	}
	for range 20 {
		for _, args := range [][]string{{"stats"}, {"dead", "list"}, {"show", "nope"}} {
			run(t.Context(), args, newCLI(args, &bytes.Buffer{}, &bytes.Buffer{}, func(k string) string { return map[string]string{"OUTBOX_DB": u}[k] }))
		}
	}
	var n int64
	if err := db.Raw("SELECT COUNT(*) FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()", name).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if sqlDB, _ := db.DB(); n > int64(sqlDB.Stats().OpenConnections) {
		t.Errorf("%d connections on %s after 60 commands, the test's own pool holds %d: the commands left theirs open", n, name, sqlDB.Stats().OpenConnections)
	}
}
