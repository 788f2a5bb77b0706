package main

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// hostile is text that repaints a terminal: a clear screen and a fake
// prompt (ESC), a carriage return over the line, a C1 CSI, DEL, and a
// right-to-left override that reverses what follows.
const hostile = "\x1b[2J\x1b[Hfake prompt$ \rOVERWRITTEN \u009b31m red \x7f\u202egnp.exe\u2066x\u2069"

// rawControl returns the first terminal control character in s (C0 but
// newline and tab, DEL, C1, a Unicode bidirectional control, or a byte
// that is not UTF-8), and whether there is one.
func rawControl(s string) (string, bool) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			return s[i-1 : i], true
		case r == '\n' || r == '\t':
		case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0, r == 0x061c, r == 0x200e, r == 0x200f,
			r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
			return string(r), true
		}
	}
	return "", false
}

func noRawControl(t *testing.T, what string, r result) {
	t.Helper()
	for _, out := range []struct{ name, s string }{{"stdout", r.stdout}, {"stderr", r.stderr}} {
		if c, ok := rawControl(out.s); ok {
			t.Errorf("%s: %s holds the raw control character %q:\n%q", what, out.name, c, out.s)
		}
	}
}

// Every text output escapes terminal control characters, wherever they
// come from (an event id, a type, a last error, a relay's heartbeat, an
// error of the database); the JSON output carries the values exactly.
func TestControlCharactersAreEscaped(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			forged := "ok-1\n9999  forged-row  cli.test  1"
			insertHostile(t, db, forged)

			for _, args := range [][]string{{"dead", "list"}, {"dead", "list", "--wide"}, {"show", forged}, {"show", "h2"}, {"stats"},
				{"show", "missing" + hostile}, {"dead", "replay", "--id", forged}, {"redeliver", "--id", "h2", "--id", hostile},
				{"dead", "list", "--type", hostile}, {"stats", "--bogus" + hostile}, {"frobnicate" + hostile}} {
				r := cmd(t, u, args...)
				noRawControl(t, strings.Join(args, " "), r)
			}
			list := cmd(t, u, "dead", "list").ok(t).stdout
			if n := strings.Count(list, "\n"); n != 3 {
				t.Errorf("dead list printed %d lines, want a header and 2 rows:\n%s", n, list)
			}
			if !strings.Contains(list, `ok-1\n9999`) || !strings.Contains(cmd(t, u, "show", "h2").stdout, `\x1b[2J`) {
				t.Errorf("the escapes are not shown:\n%s", list)
			}

			got := decodeJSON[deadListJSON](t, cmd(t, u, "dead", "list", "--json").ok(t).stdout)
			if len(got.Events) != 2 || got.Events[0].EventID != forged || got.Events[1].LastError != hostile || got.Events[1].Type != "t"+hostile {
				t.Errorf("dead list --json: %+v", got)
			}
			e := decodeJSON[eventJSON](t, cmd(t, u, "show", "--json", "h2").ok(t).stdout)
			if e.LastError == nil || *e.LastError != hostile || e.Headers["x"] != hostile || e.Payload != hostile {
				t.Errorf("show --json changed the values: %+v", e)
			}
			s := decodeJSON[statsJSON](t, cmd(t, u, "stats", "--json").ok(t).stdout)
			if len(s.Relays) != 1 || s.Relays[0].Host != hostile {
				t.Errorf("stats --json: %+v", s.Relays)
			}
		})
	}
}

// insertHostile writes two dead events and a relay's heartbeat whose
// text holds control characters.
func insertHostile(t testing.TB, db *gorm.DB, forgedID string) {
	t.Helper()
	err := db.Transaction(func(tx *gorm.DB) error {
		return outbox.Emit(tx, outbox.Event{ID: forgedID, Type: "cli.test", Payload: 1},
			outbox.Event{ID: "h2", Type: "t" + hostile, PartitionKey: "k" + hostile, Payload: []byte(hostile), Headers: map[string]string{"x": hostile}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("UPDATE outbox_events SET status = 'dead', attempts = 3, last_error = ?", hostile).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("UPDATE outbox_events SET last_error = 'plain' WHERE event_id = ?", forgedID).Error; err != nil {
		t.Fatal(err)
	}
	if err := db.Exec("INSERT INTO outbox_events_relays (id, host, pid, publisher, heartbeat_ms, started_at, last_beat) VALUES (?, ?, 1, ?, 1000, ?, ?)",
		"r"+hostile, hostile, hostile, "2020-01-01 00:00:00", "2020-01-01 00:00:00").Error; err != nil {
		t.Fatal(err)
	}
}

// dead replay counts each id once, as redeliver does: an id given twice
// and replayed is not reported as not dead.
func TestDeadReplayCountsDistinctIDs(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			emit(t, db, "x", "y")
			if err := db.Exec("UPDATE outbox_events SET status = 'dead'").Error; err != nil {
				t.Fatal(err)
			}
			r := cmd(t, u, "dead", "replay", "--id", "x", "--id", "x", "--id", "nope", "--id", "nope")
			if !strings.Contains(r.stderr, "1 dead event(s) match") {
				t.Errorf("dead replay without --yes: %s", r.stderr)
			}
			r = cmd(t, u, "dead", "replay", "--id", "x", "--id", "x", "--yes").ok(t)
			if strings.TrimSpace(r.stdout) != "replayed 1 dead event(s)" {
				t.Errorf("dead replay --id x --id x: %q", r.stdout)
			}
			r = cmd(t, u, "dead", "replay", "--id", "y", "--id", "nope", "--id", "nope", "--id", "x", "--yes").ok(t)
			if !strings.Contains(r.stdout, "replayed 1 dead event(s)") || !strings.Contains(r.stdout, "2 of the 3 distinct ids were not dead") {
				t.Errorf("dead replay of y, nope twice and x: %q", r.stdout)
			}
		})
	}
}

// A payload that is JSON but not UTF-8 (a json.RawMessage given to Emit,
// which json.Valid accepts) keeps the JSON output JSON: show --json and
// the stdout publisher's CloudEvents lines carry it as base64, exactly,
// where the escaping of the output turned its bytes into \xff, which no
// JSON decoder reads.
func TestJSONOutputOfANonUTF8Payload(t *testing.T) {
	payload := "\"a\xffb\u0085\u202e\""
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			err := db.Transaction(func(tx *gorm.DB) error {
				return outbox.Emit(tx, outbox.Event{ID: "bin", Type: "cli.test", Payload: json.RawMessage(payload)})
			})
			if err != nil {
				t.Fatal(err)
			}
			r := cmd(t, u, "show", "--json", "bin").ok(t)
			noRawControl(t, "show --json", r)
			var e struct {
				Payload         string `json:"payload"`
				PayloadEncoding string `json:"payload_encoding"`
			}
			if err := json.Unmarshal([]byte(r.stdout), &e); err != nil {
				t.Fatalf("show --json is not JSON: %v\n%s", err, r.stdout)
			}
			if b, err := base64.StdEncoding.DecodeString(e.Payload); err != nil || string(b) != payload || e.PayloadEncoding != "base64" {
				t.Errorf("show --json: payload %q (%s), want the bytes %q as base64", e.Payload, e.PayloadEncoding, payload)
			}
			r = cmd(t, u, "dispatch-once", "--to", "stdout").ok(t)
			noRawControl(t, "dispatch-once --to stdout", r)
			first, _, _ := strings.Cut(r.stdout, "\n")
			env, err := outbox.DecodeEnvelope([]byte(first))
			if err != nil {
				t.Fatalf("dispatch-once --to stdout printed a line that is not a CloudEvent: %v\n%s", err, r.stdout)
			}
			if string(env.Payload) != payload {
				t.Errorf("the CloudEvent's payload is %q, want %q", env.Payload, payload)
			}
		})
	}
}
