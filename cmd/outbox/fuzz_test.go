package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// unsafeFlags are the flags a fuzzed command line may not set: where the
// command connects or listens (the fuzzer must not create files, reach
// servers or take ports of its choosing).
var unsafeFlags = []string{"db", "driver", "listen", "metrics-addr", "redis"}

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
	} {
		f.Add(strings.Join(seed, "\x1f"))
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := sanitize(strings.Split(line, "\x1f"))
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
		}
	})
}
