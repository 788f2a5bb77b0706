// Package servers starts throw-away database and Redis servers for the
// fault-injection suite: each in its own temporary directory, on a port the
// kernel chose, in its own process group, so that a test can kill, freeze
// and restart it without disturbing anything else. Every process is killed
// (its whole group) when the test that started it ends, failed or not.
package servers

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RequireEnv set to 1 makes a missing binary fail the test instead of
// skipping it.
const RequireEnv = "OUTBOX_REQUIRE_SERVICES"

// Need returns the path of each binary (an absolute path, or a name looked
// up in PATH). A missing one skips t with a message naming it, or fails t
// when OUTBOX_REQUIRE_SERVICES=1.
func Need(t testing.TB, bins ...string) []string {
	t.Helper()
	paths := make([]string, len(bins))
	for i, b := range bins {
		p, err := exec.LookPath(b)
		if err != nil {
			msg := fmt.Sprintf("fault tests need %s, which is not installed (%v)", b, err)
			if os.Getenv(RequireEnv) == "1" {
				t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
			}
			t.Skip(msg)
		}
		paths[i] = p
	}
	return paths
}

// FreePort returns a TCP port on 127.0.0.1 that the kernel just handed out
// and that nobody listens on.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// Spec describes a process to run.
type Spec struct {
	Name string   // for messages
	Path string   // the binary
	Args []string // its arguments
	Env  []string // added to the test's environment
	Dir  string   // working directory (default: the test's)
	Log  string   // file that receives stdout and stderr (appended)
	// Cred runs the process as another user (PostgreSQL refuses root).
	Cred *syscall.Credential
}

// Process is a running (or exited) process in a process group of its own.
type Process struct {
	spec Spec

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error // exit status once done is closed
}

// Spawn starts spec and kills its process group when t ends.
func Spawn(t testing.TB, spec Spec) *Process {
	t.Helper()
	p := &Process{spec: spec}
	if err := p.Start(); err != nil {
		t.Fatalf("starting %s: %v", spec.Name, err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("last lines of %s (%s):\n%s", spec.Name, spec.Log, Tail(spec.Log, 40))
		}
	})
	return p
}

// Start starts the process again after it exited (or for the first time).
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
		default:
			return fmt.Errorf("%s is still running", p.spec.Name)
		}
	}
	cmd := exec.Command(p.spec.Path, p.spec.Args...)
	cmd.Env = append(os.Environ(), p.spec.Env...)
	cmd.Dir = p.spec.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL, // the test process died: take the server with it
		Credential: p.spec.Cred,
	}
	if p.spec.Log != "" {
		f, err := os.OpenFile(p.spec.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close() // the child has its own descriptor
		fmt.Fprintf(f, "==== %s starting at %s\n", p.spec.Name, time.Now().Format(time.RFC3339Nano))
		cmd.Stdout, cmd.Stderr = f, f
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	p.cmd, p.done, p.err = cmd, done, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Pid is the process id (also its process group id).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Running reports whether the process has not exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Exited returns a channel closed when the process exits.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// ExitErr is the exit status after the process exited.
func (p *Process) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Signal sends sig to the process only.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return errors.New(p.spec.Name + " is not running")
	}
	return syscall.Kill(p.Pid(), sig)
}

// SignalGroup sends sig to the process group.
func (p *Process) SignalGroup(sig syscall.Signal) error {
	if !p.Running() {
		return errors.New(p.spec.Name + " is not running")
	}
	return syscall.Kill(-p.Pid(), sig)
}

// Wait waits up to timeout for the process to exit and reports whether it
// did.
func (p *Process) Wait(timeout time.Duration) bool {
	select {
	case <-p.Exited():
		return true
	case <-time.After(timeout):
		return false
	}
}

// Kill sends SIGKILL to the whole process group (a stopped process is
// killed too) and waits for the process to exit.
func (p *Process) Kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	pid := cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(-pid, syscall.SIGCONT)
	<-p.Exited()
	// Children that left the group's leader behind (PostgreSQL backends)
	// are in the group too: make sure they are gone.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
}

// Tail returns the last n lines of the file at path.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}

// waitFor calls ready every 50ms until it returns nil or timeout passes, or
// the process exits.
func waitFor(p *Process, timeout time.Duration, ready func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if !p.Running() {
			return fmt.Errorf("%s exited (%v) before it was ready: %w", p.spec.Name, p.ExitErr(), err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %v: %w", p.spec.Name, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
