package servers

import (
	"context"
	"database/sql"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // database/sql driver "mysql"
)

// MariaDB is a throw-away MariaDB server (root without a password on
// 127.0.0.1) with a database named outbox. InnoDB writes its log at every
// commit but flushes it to disk once a second: the faults are process
// crashes, after which the operating system still holds every write.
type MariaDB struct {
	Port int
	dir  string
	proc *Process
}

// StartMariaDB starts a server and kills it when t ends. It skips t, or
// fails it under OUTBOX_REQUIRE_SERVICES=1, when mariadb-install-db or
// mariadbd is missing.
func StartMariaDB(t testing.TB, opts ...Option) *MariaDB {
	t.Helper()
	paths := Need(t, "mariadb-install-db", "mariadbd")
	tmpl, err := template("mariadb", func(dir string) error {
		out, err := exec.Command(paths[0], "--no-defaults", "--datadir="+dir, "--user=root",
			"--auth-root-authentication-method=normal", "--skip-test-db").CombinedOutput()
		if err != nil {
			return fmt.Errorf("mariadb-install-db: %v: %s", err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	o := options(opts)
	root := serverDir(t, "mariadb")
	data := filepath.Join(root, "data")
	if err := copyDir(tmpl, data); err != nil {
		t.Fatal(err)
	}
	m := &MariaDB{Port: FreePort(t), dir: root}
	log := filepath.Join(root, "mariadbd.log")
	args := []string{"--no-defaults", "--datadir=" + data, "--port=" + strconv.Itoa(m.Port),
		"--socket=" + filepath.Join(root, "mysqld.sock"), "--pid-file=" + filepath.Join(root, "mysqld.pid"),
		"--bind-address=127.0.0.1", "--skip-name-resolve", "--user=root", "--log-error=" + log,
		"--innodb-buffer-pool-size=128M", "--innodb-log-file-size=32M", "--innodb-flush-log-at-trx-commit=2",
		"--skip-log-bin", "--max-connections=500", "--character-set-server=utf8mb4",
		"--collation-server=utf8mb4_unicode_ci", "--skip-performance-schema"}
	m.proc = Spawn(t, Spec{Name: "mariadbd", Path: paths[1], Args: append(args, o.args...), Env: o.env, Log: log, Dir: root})
	if err := m.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := execAll("mysql", m.rootDSN(""), []string{"CREATE DATABASE IF NOT EXISTS outbox CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"}); err != nil {
		t.Fatal(err)
	}
	return m
}

func (m *MariaDB) rootDSN(db string) string {
	return fmt.Sprintf("root@tcp(127.0.0.1:%d)/%s?parseTime=true&loc=UTC&timeout=5s", m.Port, db)
}

// DSN is the root DSN of the outbox database.
func (m *MariaDB) DSN() string { return m.rootDSN("outbox") }

// DSNAt is DSN through another address, such as a proxy's.
func (m *MariaDB) DSNAt(addr string) string {
	return fmt.Sprintf("root@tcp(%s)/outbox?parseTime=true&loc=UTC&timeout=5s", addr)
}

// UserDSN is the DSN of the outbox database as user (see CreateUser).
func (m *MariaDB) UserDSN(user string) string {
	return fmt.Sprintf("%s@tcp(127.0.0.1:%d)/outbox?parseTime=true&loc=UTC&timeout=5s", user, m.Port)
}

// CreateUser creates a user without a password that may do anything in
// the outbox database but has no global privileges (read_only applies to
// it, unlike root).
func (m *MariaDB) CreateUser(t testing.TB, user string) {
	t.Helper()
	m.Exec(t, "CREATE USER '"+user+"'@'%'", "GRANT ALL ON outbox.* TO '"+user+"'@'%'")
}

// Addr is host:port.
func (m *MariaDB) Addr() string { return "127.0.0.1:" + strconv.Itoa(m.Port) }

// Process is the mariadbd process.
func (m *MariaDB) Process() *Process { return m.proc }

func (m *MariaDB) waitReady(timeout time.Duration) error {
	return waitFor(m.proc, timeout, func() error {
		db, err := sql.Open("mysql", m.rootDSN(""))
		if err != nil {
			return err
		}
		defer db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return db.PingContext(ctx)
	})
}

// Crash kills the server with SIGKILL and waits for it to exit.
func (m *MariaDB) Crash(t testing.TB) {
	t.Helper()
	if err := m.proc.SignalGroup(syscall.SIGKILL); err != nil {
		t.Fatalf("killing mariadbd: %v", err)
	}
	m.proc.Wait(30 * time.Second)
}

// Restart starts the server again after Crash and waits until it accepts
// connections (InnoDB recovery included).
func (m *MariaDB) Restart(t testing.TB) {
	t.Helper()
	if err := m.proc.Start(); err != nil {
		t.Fatalf("restarting mariadbd: %v", err)
	}
	if err := m.waitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
}

// Exec runs statements as root on a connection of its own.
func (m *MariaDB) Exec(t testing.TB, stmts ...string) {
	t.Helper()
	if err := execAll("mysql", m.rootDSN(""), stmts); err != nil {
		t.Fatal(err)
	}
}
