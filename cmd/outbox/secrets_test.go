package main

import (
	"strings"
	"testing"

	"github.com/gormoutbox/outbox/internal/testenv"
)

// No password text appears in any output of the CLI, whatever the form of
// the address that holds it, well-formed or not (issue 8, scenario 5).
func TestNoPasswordInAnyOutput(t *testing.T) {
	u, _ := cliDB(t, testenv.SQLite)
	cmd(t, u, "migrate").ok(t)
	type tc struct {
		name   string
		db     string // OUTBOX_DB
		args   []string
		secret []string // none of these may appear
	}
	redis := func(name, url string, secret ...string) []tc {
		var out []tc
		for _, args := range [][]string{
			{"relay", "--to", "stream"}, {"relay", "--to", "asynq"},
			{"dispatch-once", "--to", "stream"}, {"dispatch-once", "--to", "asynq"},
		} {
			out = append(out, tc{name + " " + strings.Join(args, " "), u, append(args, "--redis", url), secret})
		}
		return out
	}
	stats := func(name, db string, secret ...string) tc {
		return tc{name, db, []string{"stats", "--timeout", "5s"}, secret}
	}
	cases := append(redis("bad escape", "redis://:p%zz@127.0.0.1:6379", "p%zz"),
		redis("space in userinfo", "redis://user:s3cr3t pw@127.0.0.1:6379/0", "s3cr3t")...)
	cases = append(cases, redis("bad port", "redis://:hunter2@127.0.0.1:notaport/0", "hunter2")...)
	cases = append(cases,
		tc{"dispatch-once, @ in the redis password", u, []string{"dispatch-once", "--to", "stream", "--redis", "redis://:hunt@er2@127.0.0.1:1/0"}, []string{"hunt@er2"}},
		stats("postgres, @ and a space in the password", "postgres://admin:p@ss word@127.0.0.1:1/app", "p@ss word", "ss word"),
		stats("postgres, @ in the password", "postgres://admin:hunt@er2@127.0.0.1:1/app?connect_timeout=2", "hunt@er2"),
		stats("postgres, bad escape", "postgres://admin:p%zzsecret@127.0.0.1:1/app", "p%zzsecret", "zzsecret"),
		stats("postgres, bad host", "postgres://admin:hunter2@[::1/app", "hunter2"),
		stats("postgres, password in the query", "postgres://127.0.0.1:1/app?connect_timeout=2&password=hunter2", "hunter2"),
		stats("mysql, @ and a space in the password", "mysql://admin:p@ss word@127.0.0.1:1/app", "p@ss word", "ss word"),
		stats("mysql, bad escape", "mysql://admin:p%zzsecret@127.0.0.1:1/app", "p%zzsecret", "zzsecret"),
		stats("libpq", "host=127.0.0.1 port=1 user=admin password=hunter2 dbname=app connect_timeout=2", "hunter2"),
		stats("libpq, quoted", "host=127.0.0.1 port=1 user=admin password='hunter 2\\' x' dbname=app", "hunter 2", "' x"),
		stats("libpq, unterminated quote", "host=127.0.0.1 port=1 password='unterminated secret", "unterminated secret"),
		stats("libpq, bad key", "host=127.0.0.1 port=1 password=hunter2 =oops", "hunter2"),
		stats("mysql native", "admin:hunter2@tcp(127.0.0.1:1)/app", "hunter2"),
		stats("mysql native, @ in the password", "admin:hunt@er2@tcp(127.0.0.1:1)/app", "hunt@er2"),
		stats("mysql native, malformed", "admin:hunter2@tcp(127.0.0.1:1/app", "hunter2"),
		stats("unsupported scheme", "ftp://admin:hunter2@host/x", "hunter2"),
		stats("sqlite auth", "sqlite:/nonexistent/x.db?_auth_user=a&_auth_pass=hunter2", "hunter2"),
		tc{"help shows the env default", "postgres://admin:hunter2@127.0.0.1:1/app", []string{"stats", "--help"}, []string{"hunter2"}},
		tc{"help shows the redis env default", u, []string{"relay", "--help"}, nil}, // OUTBOX_REDIS set below
		tc{"--db=, bad host", u, []string{"stats", "--db=postgres://admin:hunter2@[::1/app"}, []string{"hunter2"}},
		tc{"--redis=, bad escape", u, []string{"relay", "--to", "stream", "--redis=redis://:p%zzsecret@127.0.0.1:1/0"}, []string{"p%zzsecret"}},
		tc{"unquoted libpq words", u, []string{"stats", "--db", "host=127.0.0.1", "password=hunter2"}, []string{"hunter2"}},
	)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := cmdEnv(t, []string{"OUTBOX_DB=" + c.db, "OUTBOX_REDIS=redis://:redispw99@127.0.0.1:1/0"}, c.args...)
			out := r.stdout + r.stderr
			for _, s := range append(c.secret, "redispw99") {
				if strings.Contains(out, s) {
					t.Errorf("outbox %v printed %q (exit %d):\n%s", c.args, s, r.code, out)
				}
			}
		})
	}
}

// The masking itself, in process, on inputs the subprocess cases do not
// reach.
func TestMaskDSN(t *testing.T) {
	cases := []struct{ in, want string }{
		{"postgres://admin:hunter2@db:5432/app", "postgres://admin:xxxxx@db:5432/app"},
		{"postgres://admin:p@ss@db/app", "postgres://admin:xxxxx@db/app"},
		{"postgres://db/app?sslmode=disable&password=x%20y", "postgres://db/app?sslmode=disable&password=xxxxx"},
		{"host=db password='a b' user=x", "host=db password=xxxxx user=x"},
		{"host=db password = secret user=x", "host=db password = xxxxx user=x"},
		{"root:pw@tcp(db:3306)/app?parseTime=true", "root:xxxxx@tcp(db:3306)/app?parseTime=true"},
		{"root@tcp(db:3306)/app", "root@tcp(db:3306)/app"},
		{"sqlite:data/app.db", "sqlite:data/app.db"},
		{"redis://:pw@cache:6379/0", "redis://:xxxxx@cache:6379/0"},
	}
	for _, c := range cases {
		if got := maskDSN(c.in); got != c.want {
			t.Errorf("maskDSN(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
