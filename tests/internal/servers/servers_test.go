package servers

import (
	"context"
	"database/sql"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) {
	code := m.Run()
	RemoveTemplates()
	os.Exit(code)
}

func queryInt(t *testing.T, driver, dsn, q string) int {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow(q).Scan(&n); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	return n
}

// A committed row survives a crash (SIGQUIT) and restart; the server's
// processes are gone after the crash.
func TestPostgresCrashKeepsCommittedRows(t *testing.T) {
	t.Parallel()
	pg := StartPostgres(t)
	pg.Exec(t, "CREATE TABLE kept (n int)", "INSERT INTO kept VALUES (1), (2)")
	pid := pg.Process().Pid()
	pg.Crash(t)
	if err := syscall.Kill(-pid, 0); err == nil {
		t.Errorf("process group %d still has members after the crash", pid)
	}
	pg.Restart(t)
	if n := queryInt(t, "pgx", pg.DSN(), "SELECT count(*) FROM kept"); n != 2 {
		t.Errorf("%d rows after restart, want 2", n)
	}
}

func TestMariaDBCrashKeepsCommittedRows(t *testing.T) {
	t.Parallel()
	m := StartMariaDB(t)
	m.Exec(t, "CREATE TABLE outbox.kept (n int) ENGINE=InnoDB", "INSERT INTO outbox.kept VALUES (1), (2)")
	m.Crash(t)
	if m.Process().Running() {
		t.Fatal("mariadbd still running after SIGKILL")
	}
	m.Restart(t)
	if n := queryInt(t, "mysql", m.DSN(), "SELECT count(*) FROM kept"); n != 2 {
		t.Errorf("%d rows after restart, want 2", n)
	}
	// A user without global privileges is refused writes under read_only.
	m.CreateUser(t, "app")
	m.Exec(t, "SET GLOBAL read_only = 1")
	db, err := sql.Open("mysql", m.UserDSN("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec("INSERT INTO kept VALUES (3)"); err == nil {
		t.Error("insert under read_only succeeded")
	}
	m.Exec(t, "SET GLOBAL read_only = 0")
	if _, err := db.Exec("INSERT INTO kept VALUES (3)"); err != nil {
		t.Errorf("insert after read_only = 0: %v", err)
	}
}

func TestRedisKillKeepsAcknowledgedWritesWithAOF(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		persist RedisPersistence
		want    int64
	}{{"aof", AOFAlways, 100}, {"none", NoPersistence, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			r := StartRedis(t, tc.persist)
			c := redis.NewClient(&redis.Options{Addr: r.Addr()})
			defer c.Close()
			ctx := context.Background()
			for i := range 100 {
				if err := c.RPush(ctx, "l", i).Err(); err != nil {
					t.Fatal(err)
				}
			}
			r.Crash(t)
			r.Restart(t)
			n, err := c.LLen(ctx, "l").Result()
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.want {
				t.Errorf("%d entries after SIGKILL and restart, want %d", n, tc.want)
			}
		})
	}
}

// A process that is stopped (SIGSTOP) is still killed at cleanup.
func TestKillStoppedProcess(t *testing.T) {
	p := Spawn(t, Spec{Name: "sleep", Path: Need(t, "sleep")[0], Args: []string{"60"}})
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	p.Kill()
	if p.Running() {
		t.Fatal("still running")
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("kill took %v", time.Since(start))
	}
}
