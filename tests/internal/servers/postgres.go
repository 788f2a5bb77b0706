package servers

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"
)

// PostgresBinEnv overrides the directory of the PostgreSQL binaries.
const PostgresBinEnv = "OUTBOX_FAULTS_PG_BIN"

// DefaultPostgresBin is where Debian installs PostgreSQL 15.
const DefaultPostgresBin = "/usr/lib/postgresql/15/bin"

// Postgres is a throw-away PostgreSQL server running as the OS user
// postgres, with trust authentication for the superuser postgres on
// 127.0.0.1. It runs with fsync off: the faults are process crashes, after
// which the operating system still holds every write (not power losses).
type Postgres struct {
	Port int
	dir  string
	proc *Process
}

// StartPostgres starts a server and stops it (killing its process group)
// when t ends. It skips t, or fails it under OUTBOX_REQUIRE_SERVICES=1,
// when initdb, postgres or the OS user postgres is missing.
func StartPostgres(t testing.TB, opts ...Option) *Postgres {
	t.Helper()
	bin := os.Getenv(PostgresBinEnv)
	if bin == "" {
		bin = DefaultPostgresBin
	}
	paths := Need(t, filepath.Join(bin, "initdb"), filepath.Join(bin, "postgres"))
	cred, err := osUser("postgres")
	if err != nil {
		msg := fmt.Sprintf("fault tests need the OS user postgres to run PostgreSQL: %v", err)
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	tmpl, err := template("postgres", func(dir string) error {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return err
		}
		if err := chown(dir, cred); err != nil {
			return err
		}
		cmd := exec.Command(paths[0], "-D", dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("initdb: %v: %s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	o := options(opts)
	root := serverDir(t, "pg")
	data := filepath.Join(root, "data")
	if err := copyDir(tmpl, data); err != nil {
		t.Fatal(err)
	}
	p := &Postgres{Port: FreePort(t), dir: root}
	args := []string{"-D", data, "-p", strconv.Itoa(p.Port), "-k", data,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=64MB", "-c", "log_min_messages=warning",
		"-c", "log_line_prefix=%m [%p] "}
	p.proc = Spawn(t, Spec{
		Name: "postgres", Path: paths[1], Args: append(args, o.args...), Env: o.env,
		Log: filepath.Join(root, "postgres.log"), Cred: cred, Dir: root,
	})
	if err := p.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	return p
}

// DSN is the URL of the postgres database as the superuser.
func (p *Postgres) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.Port)
}

// DSNAt is DSN through another address, such as a proxy's.
func (p *Postgres) DSNAt(addr string) string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable", addr)
}

// Addr is host:port.
func (p *Postgres) Addr() string { return "127.0.0.1:" + strconv.Itoa(p.Port) }

// Process is the postmaster.
func (p *Postgres) Process() *Process { return p.proc }

// Log is the server's log file.
func (p *Postgres) Log() string { return filepath.Join(p.dir, "postgres.log") }

func (p *Postgres) waitReady(timeout time.Duration) error {
	return waitFor(p.proc, timeout, func() error { return p.ping() })
}

func (p *Postgres) ping() error {
	db, err := sql.Open("pgx", p.DSN()+"&connect_timeout=2")
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	return db.PingContext(ctx)
}

// Crash stops the server the way `pg_ctl stop -m immediate` does (SIGQUIT
// to the postmaster: every backend exits at once, no checkpoint; the next
// start runs crash recovery), and waits for it to exit.
func (p *Postgres) Crash(t testing.TB) {
	t.Helper()
	if err := p.proc.Signal(syscall.SIGQUIT); err != nil {
		t.Fatalf("crashing postgres: %v", err)
	}
	if !p.proc.Wait(30 * time.Second) {
		t.Log("postgres did not exit 30s after SIGQUIT; killing it")
		p.proc.Kill()
	}
	_ = p.proc.SignalGroup(syscall.SIGKILL) // backends still finishing
}

// Restart starts the server again after Crash and waits until it accepts
// connections (crash recovery included).
func (p *Postgres) Restart(t testing.TB) {
	t.Helper()
	if err := p.proc.Start(); err != nil {
		t.Fatalf("restarting postgres: %v", err)
	}
	if err := p.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// Exec runs statements as the superuser on a connection of its own (a
// read-write one, even while default_transaction_read_only is on).
func (p *Postgres) Exec(t testing.TB, stmts ...string) {
	t.Helper()
	if err := execAll("pgx", p.DSN()+"&default_transaction_read_only=off", stmts); err != nil {
		t.Fatal(err)
	}
}

func execAll(driver, dsn string, stmts []string) error {
	db, err := sql.Open(driver, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range stmts {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}
