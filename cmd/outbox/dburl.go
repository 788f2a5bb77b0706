package main

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	mysqldriver "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// dbAddr is a parsed --db URL.
type dbAddr struct {
	dialector gorm.Dialector
	shown     string // the address with its password hidden
}

// parseDB turns a URL-style database address into a GORM dialector. The
// scheme picks the driver: postgres:// (or postgresql://), mysql:// and
// sqlite: (sqlite:relative.db, sqlite:/absolute.db).
func parseDB(raw string) (*dbAddr, error) {
	scheme, _, ok := strings.Cut(raw, ":")
	if !ok {
		return nil, usagef("--db %q is not a URL: want postgres://…, mysql://… or sqlite:path", redact(raw))
	}
	switch strings.ToLower(scheme) {
	case "postgres", "postgresql":
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" {
			return nil, usagef("--db %s: a PostgreSQL URL is postgres://user:password@host:5432/database", redact(raw))
		}
		return &dbAddr{dialector: postgres.Open(raw), shown: u.Redacted()}, nil
	case "mysql":
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || strings.Trim(u.Path, "/") == "" {
			return nil, usagef("--db %s: a MySQL URL is mysql://user:password@host:3306/database", redact(raw))
		}
		cfg := mysql.NewConfig()
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
		cfg.Net = "tcp"
		cfg.Addr = u.Host
		if u.Port() == "" {
			cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
		cfg.DBName = strings.Trim(u.Path, "/")
		cfg.ParseTime = true
		cfg.Loc = time.UTC // the outbox stores UTC
		cfg.Params = map[string]string{}
		for k, vs := range u.Query() {
			switch k {
			case "parseTime", "loc":
				// fixed above: the outbox needs them
			default:
				cfg.Params[k] = vs[len(vs)-1]
			}
		}
		return &dbAddr{dialector: mysqldriver.Open(cfg.FormatDSN()), shown: u.Redacted()}, nil
	case "sqlite", "sqlite3", "file":
		path := strings.TrimPrefix(raw[len(scheme)+1:], "//")
		file, query, _ := strings.Cut(path, "?")
		if file == "" {
			return nil, usagef("--db %s: a SQLite address is sqlite:path/to/file.db", raw)
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			return nil, usagef("--db %s: %v", raw, err)
		}
		if q.Get("_txlock") == "" {
			q.Set("_txlock", "immediate")
		}
		if q.Get("_busy_timeout") == "" {
			q.Set("_busy_timeout", "5000")
		}
		return &dbAddr{dialector: sqlite.Open("file:" + file + "?" + q.Encode()), shown: "sqlite:" + file}, nil
	}
	return nil, usagef("--db: unsupported scheme %q: want postgres://, mysql:// or sqlite:", scheme)
}

// redact hides what looks like a password in an address that did not parse.
func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		return u.Redacted()
	}
	return passwordRE.ReplaceAllString(raw, "${1}xxxxx@")
}

var passwordRE = regexp.MustCompile(`(://[^:/@]*:)[^@]*@`)

// open connects and checks the connection within ctx.
func (a *dbAddr) open(ctx context.Context) (*gorm.DB, error) {
	db, err := gorm.Open(a.dialector, &gorm.Config{
		Logger:                 logger.Discard,
		DisableAutomaticPing:   true,
		SkipDefaultTransaction: true,
	})
	if err != nil {
		return nil, fmt.Errorf("opening %s: %v", a.shown, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	if err := ping(ctx, sqlDB); err != nil {
		_ = sqlDB.Close()
		return nil, fmt.Errorf("cannot reach %s: %v", a.shown, err)
	}
	return db, nil
}

func ping(ctx context.Context, db *sql.DB) error {
	done := make(chan error, 1)
	go func() { done <- db.PingContext(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("no answer: %w", ctx.Err())
	}
}
