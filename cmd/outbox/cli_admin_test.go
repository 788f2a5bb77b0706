package main

import (
	"bufio"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
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
