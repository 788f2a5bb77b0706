package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// admin serves the page under its prefix, with basic authentication when
// the credentials are set, and refuses a non-loopback address without
// them.
func TestAdminCommand(t *testing.T) {
	u, db := cliDB(t, testenv.SQLite)
	if err := outbox.Migrate(db); err != nil {
		t.Fatal(err)
	}
	r := cmdEnv(t, []string{"OUTBOX_DB=" + u}, "admin", "--listen", "0.0.0.0:0")
	if r.code != 2 || !strings.Contains(r.stderr, "OUTBOX_ADMIN_USER") {
		t.Errorf("a public address without credentials: exit %d, %s", r.code, r.stderr)
	}

	proc := exec.Command(binary, "admin", "--listen", "127.0.0.1:0", "--prefix", "/outbox/", "--read-only")
	proc.Env = append(os.Environ(), "OUTBOX_DB="+u, "OUTBOX_ADMIN_USER=ops", "OUTBOX_ADMIN_PASSWORD=long-secret-pw")
	out, err := proc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	proc.Stderr = io.Discard
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = proc.Process.Signal(syscall.SIGTERM)
		if err := proc.Wait(); err != nil {
			t.Errorf("admin exited with %v", err)
		}
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	base := strings.TrimSpace(strings.TrimPrefix(line, "serving the admin page at "))
	if !strings.HasSuffix(base, "/outbox/") {
		t.Fatalf("announced %q", line)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	get := func(user, pw string) int {
		req, _ := http.NewRequest(http.MethodGet, base+"events", nil)
		if user != "" {
			req.SetBasicAuth(user, pw)
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("without credentials: %d", code)
	}
	if code := get("ops", "long-secret-pw"); code != http.StatusOK {
		t.Errorf("with credentials: %d", code)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"actions/replay", strings.NewReader("event_id=x&confirm=yes"))
	req.SetBasicAuth("ops", "long-secret-pw")
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("--read-only POST: %d, want 405", res.StatusCode)
	}
}

// startAdmin starts outbox admin with args and env, and returns its base
// URL and a function returning what it printed on stderr so far.
func startAdmin(t *testing.T, env []string, args ...string) (string, func() string) {
	t.Helper()
	proc := exec.Command(binary, append([]string{"admin", "--listen", "127.0.0.1:0"}, args...)...)
	proc.Env = append(os.Environ(), env...)
	out, err := proc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	proc.Stderr = &stderr
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = proc.Process.Signal(syscall.SIGTERM)
		_ = proc.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("%v: %s", err, stderr.String())
	}
	return strings.TrimSpace(strings.TrimPrefix(line, "serving the admin page at ")), stderr.String
}

// syncBuffer is a bytes.Buffer for a process's output, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// outbox admin without authentication answers loopback and the names of
// --allow-host only, as a browser after a DNS rebinding asks it, and
// warns at start that it authenticates nobody.
func TestAdminCommandRefusesRebinding(t *testing.T) {
	u, db := cliDB(t, testenv.SQLite)
	if err := outbox.Migrate(db); err != nil {
		t.Fatal(err)
	}
	emit(t, db, "x")
	if err := db.Exec("UPDATE outbox_events SET status = 'dead'").Error; err != nil {
		t.Fatal(err)
	}
	base, stderr := startAdmin(t, []string{"OUTBOX_DB=" + u}, "--allow-host", "ops.internal")
	// stderr is copied by a goroutine of its own: give it a moment.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(stderr(), "without authentication"); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("no warning about the missing authentication:\n%s", stderr())
			break
		}
	}
	port := base[strings.LastIndex(base, ":")+1 : len(base)-1]
	client := &http.Client{Timeout: 10 * time.Second}
	send := func(method, path, host, body string, hdr ...string) int {
		req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
		req.Host = host
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	evil := "rebind.attacker.example:" + port
	if code := send(http.MethodGet, "events/x?payload=1", evil, ""); code != http.StatusForbidden {
		t.Errorf("GET through a rebinding: %d, want 403", code)
	}
	if code := send(http.MethodPost, "actions/replay", evil, "event_id=x&confirm=yes", "Origin", "http://"+evil, "Sec-Fetch-Site", "same-origin"); code != http.StatusForbidden {
		t.Errorf("POST through a rebinding: %d, want 403", code)
	}
	for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "ops.internal"} {
		if code := send(http.MethodGet, "events/x?payload=1", host, ""); code != http.StatusOK {
			t.Errorf("GET with Host %s: %d, want 200", host, code)
		}
	}
	if n := status(t, db, "dead"); n != 1 {
		t.Errorf("the rebinding changed the event: %d dead", n)
	}
	r := cmdEnv(t, []string{"OUTBOX_DB=" + u}, "admin", "--allow-host", "*")
	if r.code != 2 || !strings.Contains(r.stderr, "DNS rebinding") {
		t.Errorf("--allow-host * without authentication: exit %d, %s", r.code, r.stderr)
	}
	if r := cmdEnv(t, []string{"OUTBOX_DB=" + u}, "admin", "--allow-host", "bad host"); r.code != 2 || !strings.Contains(r.stderr, "allowed host") {
		t.Errorf("a bad --allow-host: exit %d, %s", r.code, r.stderr)
	}
}
