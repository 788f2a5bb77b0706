package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// stats shows the role of relays run with relay.WithSingleActive: one
// active, the other standby.
func TestStatsShowsSingleActiveRoles(t *testing.T) {
	u, db := cliDB(t, testenv.Postgres)
	cmd(t, u, "migrate").ok(t)
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan error
	for _, id := range []string{"relay-a", "relay-b"} {
		r, err := relay.New(db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }),
			relay.WithWorkerID(id), relay.WithSingleActive(), relay.WithHeartbeat(100*time.Millisecond),
			relay.WithLogger(testenv.Logger(t)))
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan error, 1)
		go func() { ch <- r.Start(ctx) }()
		done = append(done, ch)
		time.Sleep(200 * time.Millisecond) // relay-a takes the lock first
	}
	defer func() {
		cancel()
		for _, ch := range done {
			<-ch
		}
	}()
	var roles string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		stats := decodeJSON[statsJSON](t, cmd(t, u, "stats", "--json").ok(t).stdout)
		roles = ""
		for _, r := range stats.Relays {
			roles += fmt.Sprintf("%s=%s,%s ", r.ID, r.Role, r.Publisher)
		}
		if roles == "relay-a=active,relay.PublisherFunc relay-b=standby,relay.PublisherFunc " {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if roles != "relay-a=active,relay.PublisherFunc relay-b=standby,relay.PublisherFunc " {
		t.Fatalf("stats --json roles: %q", roles)
	}
	text := cmd(t, u, "stats").ok(t).stdout
	for _, want := range []string{"live (active)", "live (standby)"} {
		if !strings.Contains(text, want) {
			t.Errorf("stats text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "WARNING") {
		t.Errorf("stats warns about relays that deliver to one place:\n%s", text)
	}
}

// relayProc is an "outbox relay" process of the test, killed at the end.
type relayProc struct {
	proc  *exec.Cmd
	lines atomic.Int64 // events printed (stdout)
}

func startRelayProc(t *testing.T, dbURL string, args ...string) *relayProc {
	t.Helper()
	p := &relayProc{proc: exec.Command(binary, append([]string{"relay"}, args...)...)}
	p.proc.Env = append(os.Environ(), "OUTBOX_DB="+dbURL)
	out, err := p.proc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.proc.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			p.lines.Add(1)
		}
	}()
	t.Cleanup(func() { _ = p.proc.Process.Kill(); _ = p.proc.Wait() })
	return p
}

// waitRoles waits until "outbox stats --json" lists the live relays with
// these roles (id=role, sorted by id); a killed relay is live until its
// heartbeats are missing for three intervals (30s).
func waitRoles(t *testing.T, u, want string) {
	t.Helper()
	var got string
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = ""
		for _, r := range decodeJSON[statsJSON](t, cmd(t, u, "stats", "--json").ok(t).stdout).Relays {
			if r.Live {
				got += r.ID + "=" + r.Role + " "
			}
		}
		if got == want {
			return
		}
	}
	t.Fatalf("stats roles %q, want %q", got, want)
}

// Two "outbox relay --single-active" processes: one delivers, the other
// stands by; the active one is killed (SIGKILL: its database session ends
// with it) and the standby takes over and delivers the rest.
func TestRelaySingleActiveFailover(t *testing.T) {
	for _, d := range []string{testenv.Postgres, testenv.MySQL} {
		t.Run(d, func(t *testing.T) {
			u, db := cliDB(t, d)
			cmd(t, u, "migrate").ok(t)
			args := []string{"--to", "stdout", "--single-active", "--poll-interval", "100ms"}
			a := startRelayProc(t, u, append(args, "--worker-id", "relay-a")...)
			waitRoles(t, u, "relay-a=active ")
			b := startRelayProc(t, u, append(args, "--worker-id", "relay-b")...)
			waitRoles(t, u, "relay-a=active relay-b=standby ")
			emit(t, db, ids("a", 20)...)
			waitCount(t, func() int64 { return a.lines.Load() }, 20)
			if err := a.proc.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = a.proc.Wait()
			emit(t, db, ids("b", 20)...)
			waitCount(t, func() int64 { return b.lines.Load() }, 20)
			if n := status(t, db, "published"); n != 40 {
				t.Errorf("%d events published, want 40", n)
			}
			// relay-a's last heartbeat says active until it is stale: the
			// standby's own says it took over.
			waitRoles(t, u, "relay-a=active relay-b=active ")
		})
	}
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return out
}

func waitCount(t *testing.T, n func() int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for n() < want {
		if time.Now().After(deadline) {
			t.Fatalf("%d events delivered, want %d", n(), want)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // nothing more
	if n() != want {
		t.Fatalf("%d events delivered, want %d", n(), want)
	}
}
