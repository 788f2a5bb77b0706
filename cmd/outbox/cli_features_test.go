package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// show prints one event whole, in text and JSON, flags before or after
// the id.
func TestShowCommand(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			logAttempts(t, db, "a1")
			err := db.Transaction(func(tx *gorm.DB) error {
				return outbox.Emit(tx,
					outbox.Event{ID: "j1", Type: "order.created", AggregateType: "order", AggregateID: "7", PartitionKey: "order:7",
						Payload: map[string]any{"total": 42, "items": []string{"a"}}, Headers: map[string]string{"traceparent": "00-abc"}},
					outbox.Event{ID: "t1", Type: "note", Payload: []byte("plain text")},
					outbox.Event{ID: "b1", Type: "blob", Payload: []byte{0xff, 0xfe, 0x00}})
			})
			if err != nil {
				t.Fatal(err)
			}
			long := "boom\n" + strings.Repeat("y", 300) + " THE-END"
			if err := db.Exec("UPDATE outbox_events SET status = 'dead', attempts = 3, last_error = ? WHERE event_id = 'j1'", long).Error; err != nil {
				t.Fatal(err)
			}
			r := cmd(t, u, "show", "j1").ok(t)
			for _, want := range []string{"j1", "order.created (version 1)", "dead", "order:7", "traceparent", "00-abc", `"total": 42`, long[5:]} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("show j1 lacks %q:\n%s", want, r.stdout)
				}
			}
			e := decodeJSON[eventJSON](t, cmd(t, u, "show", "--json", "j1").ok(t).stdout)
			if p, ok := e.Payload.(map[string]any); !ok || p["total"] != float64(42) || e.PayloadEncoding != "json" ||
				e.Status != outbox.StatusDead || e.Attempts != 3 || e.LastError == nil || *e.LastError != long ||
				e.Headers["traceparent"] != "00-abc" || e.ClaimVersion != 0 || e.CreatedAt.IsZero() {
				t.Errorf("show --json j1: %+v", e)
			}
			if e := decodeJSON[eventJSON](t, cmd(t, u, "show", "t1", "--json").ok(t).stdout); e.Payload != "plain text" || e.PayloadEncoding != "text" {
				t.Errorf("show t1: %+v", e)
			}
			if e := decodeJSON[eventJSON](t, cmd(t, u, "show", "b1", "--json").ok(t).stdout); e.Payload != "//4A" || e.PayloadEncoding != "base64" {
				t.Errorf("show b1: %+v", e)
			}
			if !strings.Contains(r.stdout, "attempt log: none recorded") || e.AttemptLog == nil || len(e.AttemptLog) != 0 {
				t.Errorf("show j1: want no attempts recorded:\n%s\n%+v", r.stdout, e.AttemptLog)
			}
			r = cmd(t, u, "show", "a1").ok(t)
			for _, want := range []string{"attempt log:", "retried", "kaput on the first try", "published", "cli-relay"} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("show a1 lacks %q:\n%s", want, r.stdout)
				}
			}
			a := decodeJSON[eventJSON](t, cmd(t, u, "show", "--json", "a1").ok(t).stdout).AttemptLog
			if len(a) != 2 || a[0].Outcome != "retried" || a[0].Attempt != 1 || a[0].Error != "kaput on the first try" ||
				a[1].Outcome != "published" || a[1].ClaimVersion != 2 || a[1].RelayID != "cli-relay" || a[1].CreatedAt.IsZero() {
				t.Errorf("show --json a1: attempt log %+v", a)
			}
			if r := cmd(t, u, "show", "nope"); r.code != 1 || !strings.Contains(r.stderr, "event not found") {
				t.Errorf("show of a missing event: exit %d, %s", r.code, r.stderr)
			}
			if r := cmd(t, u, "show"); r.code != 2 || !strings.Contains(r.stderr, "missing EVENT_ID") {
				t.Errorf("show without an id: exit %d, %s", r.code, r.stderr)
			}
		})
	}
}

// redeliver refuses without --yes, saying what it would do; with --yes it
// returns published and dead events to pending, and nothing else.
func TestRedeliverCommand(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			emit(t, db, "p1", "p2")
			cmd(t, u, "dispatch-once", "--to", "stdout", "--attempt-log").ok(t)
			emit(t, db, "x", "dd", "busy")
			if err := db.Exec("UPDATE outbox_events SET status = 'dead', last_error = 'boom' WHERE event_id = 'dd'").Error; err != nil {
				t.Fatal(err)
			}
			if err := db.Exec("UPDATE outbox_events SET status = 'publishing', locked_by = 'someone' WHERE event_id = 'busy'").Error; err != nil {
				t.Fatal(err)
			}
			args := []string{"redeliver", "--id", "p1", "--id", "dd", "--id", "x", "--id", "busy", "--id", "nope"}
			r := cmd(t, u, args...)
			if r.code != 1 || !strings.Contains(r.stderr, "--yes") || !strings.Contains(r.stderr, "2 event(s) are published or dead") ||
				!strings.Contains(r.stderr, "1 pending") || !strings.Contains(r.stderr, "1 publishing") || !strings.Contains(r.stderr, "1 not found") {
				t.Errorf("redeliver without --yes: exit %d, %s", r.code, r.stderr)
			}
			if n := status(t, db, "published"); n != 2 {
				t.Fatalf("%d published after a refused redelivery, want 2", n)
			}
			got := decodeJSON[redeliverJSON](t, cmd(t, u, append(args, "--yes", "--json")...).ok(t).stdout)
			if got.Redelivered != 2 || got.LeftAlone["publishing"] != 1 || got.LeftAlone["not_found"] != 1 || got.LeftAlone["pending"] != 1 {
				t.Errorf("redeliver --yes: %+v", got)
			}
			if n := status(t, db, "publishing"); n != 1 {
				t.Errorf("the publishing event was touched")
			}
			r = cmd(t, u, "dispatch-once", "--to", "stdout", "--attempt-log").ok(t)
			// A redelivered event keeps its attempt log: one record per claim.
			if a := decodeJSON[eventJSON](t, cmd(t, u, "show", "--json", "p1").ok(t).stdout).AttemptLog; len(a) != 2 ||
				a[0].Outcome != "published" || a[0].ClaimVersion != 1 || a[1].Outcome != "published" || a[1].ClaimVersion != 2 {
				t.Errorf("attempt log of the redelivered p1: %+v, want two published claims", a)
			}
			for _, id := range []string{`"id":"p1"`, `"id":"dd"`, `"id":"x"`} {
				if !strings.Contains(r.stdout, id) {
					t.Errorf("%s not delivered again:\n%s", id, r.stdout)
				}
			}
			if strings.Contains(r.stdout, `"id":"p2"`) {
				t.Errorf("p2 was delivered again without being redelivered")
			}
		})
	}
}

// --db takes the drivers' own DSN forms, and --driver says which driver.
func TestNativeDSNForms(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			u, _ := cliDB(t, d)
			var forms [][]string // --db value, then extra flags
			switch d {
			case testenv.SQLite:
				file := strings.TrimPrefix(u, "sqlite:")
				dir := t.TempDir()
				noExt := filepath.Join(dir, "data")
				forms = [][]string{{file}, {"file:" + file + "?_busy_timeout=2000"}, {noExt, "--driver", "sqlite"}}
				cmd(t, "", "migrate", "--db", noExt, "--driver", "sqlite").ok(t)
			case testenv.Postgres:
				pu, err := url.Parse(u)
				if err != nil {
					t.Fatal(err)
				}
				kv := fmt.Sprintf("host=%s port=%s user=%s dbname=%s sslmode=disable search_path=%s",
					pu.Hostname(), pu.Port(), pu.User.Username(), strings.Trim(pu.Path, "/"), pu.Query().Get("search_path"))
				forms = [][]string{{kv}, {kv, "--driver", "postgres"}, {u, "--driver", "postgres"}}
			case testenv.MySQL:
				cfg, err := mysql.ParseDSN(os.Getenv(testenv.MySQLEnv))
				if err != nil {
					t.Fatal(err)
				}
				db := strings.TrimPrefix(u[strings.LastIndex(u, "/"):], "/")
				native := fmt.Sprintf("%s@tcp(%s)/%s", cfg.User, cfg.Addr, db) // no parseTime: the CLI adds it
				if cfg.Passwd != "" {
					native = fmt.Sprintf("%s:%s@tcp(%s)/%s", cfg.User, cfg.Passwd, cfg.Addr, db)
				}
				forms = [][]string{{native}, {native + "?loc=Local&parseTime=false", "--driver", "mysql"}}
			}
			for i, form := range forms {
				args := append([]string{"--db", form[0]}, form[1:]...)
				cmd(t, "", append([]string{"migrate"}, args...)...).ok(t)
				openDB := openTable(t, u, "")
				if d == testenv.SQLite && i == 2 {
					openDB = openTable(t, "sqlite:"+form[0], "")
				}
				id := fmt.Sprintf("form%d", i)
				emit(t, openDB, id)
				stats := decodeJSON[statsJSON](t, cmd(t, "", append([]string{"stats", "--json"}, args...)...).ok(t).stdout)
				if stats.Counts["pending"] != 1 {
					t.Errorf("form %d: stats %+v", i, stats)
				}
				r := cmd(t, "", append([]string{"dispatch-once", "--to", "stdout"}, args...)...).ok(t)
				e, err := outbox.DecodeEnvelope([]byte(strings.TrimSpace(r.stdout)))
				if err != nil || e.ID != id || time.Since(e.CreatedAt).Abs() > time.Hour {
					t.Errorf("form %d: delivered %q (%v)", i, r.stdout, err)
				}
			}
			if r := cmd(t, "", "stats", "--db", "postgres://h/db", "--driver", "mysql"); r.code != 2 || !strings.Contains(r.stderr, "--driver says mysql") {
				t.Errorf("a driver that contradicts the URL: exit %d, %s", r.code, r.stderr)
			}
		})
	}
}

// startRelay runs "outbox relay" with args in the background; stop sends
// SIGTERM and waits. lines receives its stdout lines.
func startRelay(t *testing.T, dbURL string, args ...string) (lines <-chan string, stderr *bytes.Buffer, stop func()) {
	t.Helper()
	proc := exec.Command(binary, append([]string{"relay"}, args...)...)
	proc.Env = append(os.Environ(), "OUTBOX_DB="+dbURL)
	out, err := proc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr = &bytes.Buffer{}
	proc.Stderr = stderr
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	ch := make(chan string, 1000)
	go func() {
		defer close(ch)
		s := bufio.NewScanner(out)
		for s.Scan() {
			ch <- s.Text()
		}
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		_ = proc.Process.Signal(syscall.SIGTERM)
		for range ch {
		}
		if err := proc.Wait(); err != nil {
			t.Errorf("relay exited with %v\n%s", err, stderr)
		}
	}
	t.Cleanup(stop)
	return ch, stderr, stop
}

// stats shows where each relay delivers, and warns when live relays of
// one table deliver to different places.
func TestStatsShowsPublishers(t *testing.T) {
	redisAddr := testenv.RedisAddr(t)
	u, _ := cliDB(t, testenv.Postgres)
	cmd(t, u, "migrate").ok(t)
	queue := testenv.Name("cli-queue")
	_, _, stopA := startRelay(t, u, "--to", "stdout", "--worker-id", "relay-a")
	_, _, stopB := startRelay(t, u, "--to", "asynq", "--redis", "redis://"+redisAddr+"/0", "--queue", queue, "--worker-id", "relay-b")
	var stats statsJSON
	deadline := time.Now().Add(30 * time.Second)
	for {
		stats = decodeJSON[statsJSON](t, cmd(t, u, "stats", "--json").ok(t).stdout)
		if len(stats.Relays) == 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(stats.Relays) != 2 {
		t.Fatalf("stats lists %d relays, want 2: %+v", len(stats.Relays), stats.Relays)
	}
	a, b := stats.Relays[0], stats.Relays[1]
	if a.ID != "relay-a" || a.Publisher != "stdout (CloudEvents JSON lines)" || a.HeartbeatSec != 10 {
		t.Errorf("relay a: %+v", a)
	}
	if want := "asynq queue " + queue + " (or the event's Topic) on " + redisAddr + "/0"; b.ID != "relay-b" || b.Publisher != want {
		t.Errorf("relay b: %+v, want publisher %q", b, want)
	}
	if len(stats.Warnings) != 1 || !strings.Contains(stats.Warnings[0], "different places") {
		t.Errorf("warnings: %q", stats.Warnings)
	}
	text := cmd(t, u, "stats").ok(t).stdout
	for _, want := range []string{"PUBLISHER", "asynq queue " + queue, "WARNING: live relays deliver to different places", "lag by up to one heartbeat"} {
		if !strings.Contains(text, want) {
			t.Errorf("stats text lacks %q:\n%s", want, text)
		}
	}
	stopA()
	stopB()
}

// relay --metrics-addr serves the relay's metrics in the Prometheus text
// format, with the numbers of what it relayed.
func TestRelayMetricsEndpoint(t *testing.T) {
	u, db := cliDB(t, testenv.SQLite)
	cmd(t, u, "migrate").ok(t)
	ids := make([]string, 25)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%02d", i)
	}
	emit(t, db, ids...)
	addr := freeAddr(t)
	lines, stderr, stop := startRelay(t, u, "--to", "stdout", "--metrics-addr", addr, "--batch-size", "10")
	for range ids {
		select {
		case <-lines:
		case <-time.After(30 * time.Second):
			t.Fatalf("the relay did not deliver:\n%s", stderr)
		}
	}
	// The counters are added after the batch's completion commits: wait for it.
	var body string
	deadline := time.Now().Add(30 * time.Second)
	for {
		body = scrape(t, "http://"+addr+"/metrics")
		if sumOf(body, "outbox_events_published_total") == 25 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	checks := map[string]float64{
		"outbox_events_published_total":         25,
		"outbox_events_claimed_total":           25,
		"outbox_publish_duration_seconds_count": 25,
		"outbox_event_lag_seconds_count":        25,
		"outbox_events_pending":                 0,
	}
	for name, want := range checks {
		if got := sumOf(body, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	for _, want := range []string{
		"# TYPE outbox_events_published_total counter",
		"# TYPE outbox_publish_duration_seconds histogram",
		"# TYPE outbox_events_pending gauge",
		`outbox_publish_duration_seconds_bucket{outbox_event_type="cli.test",outbox_table="outbox_events",le="+Inf"} 25`,
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("the scrape lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("scrape:\n%s", body)
	}
	stop()
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

func scrape(t *testing.T, u string) string {
	t.Helper()
	var last error
	for range 100 {
		resp, err := http.Get(u)
		if err != nil {
			last = err
			time.Sleep(100 * time.Millisecond)
			continue
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if ct := resp.Header.Get("Content-Type"); resp.StatusCode != 200 || !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
			t.Fatalf("GET %s: %s, %s\n%s", u, resp.Status, ct, b)
		}
		return string(b)
	}
	t.Fatalf("GET %s: %v", u, last)
	return ""
}

// sumOf adds the values of every series of the metric name.
func sumOf(body, name string) float64 {
	var total float64
	for _, line := range strings.Split(body, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err == nil {
			total += v
		}
	}
	return total
}

// logAttempts emits the event id and runs a relay with the attempt log
// over it twice: it fails once ("kaput on the first try"), then is
// published.
func logAttempts(t *testing.T, db *gorm.DB, id string) {
	t.Helper()
	if err := db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, outbox.Event{ID: id, Type: "attempted"}) }); err != nil {
		t.Fatal(err)
	}
	pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
		if e.Attempt == 1 {
			return errors.New("kaput on the first try")
		}
		return nil
	})
	r, err := relay.New(db, pub, relay.WithAttemptLog(), relay.WithWorkerID("cli-relay"),
		relay.WithBackoff(func(int) time.Duration { return 0 }), relay.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := r.RunOnce(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
}
