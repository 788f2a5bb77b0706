package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	mysqldriver "gorm.io/driver/mysql"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// The drivers --driver names.
const (
	driverPostgres = "postgres"
	driverMySQL    = "mysql"
	driverSQLite   = "sqlite"
)

// dbAddr is a parsed --db address.
type dbAddr struct {
	dialector gorm.Dialector
	driver    string
	shown     string   // the address with its passwords hidden
	secrets   []string // the passwords the driver will use
	file      string   // SQLite: the database file
}

// dbFormsHelp describes the forms --db takes.
const dbFormsHelp = `--db (or OUTBOX_DB) names the database, in any of these forms:
  postgres://user:password@host:5432/database?sslmode=disable   (or postgresql://)
  host=… port=5432 user=… password=… dbname=…                    (PostgreSQL key/value)
  mysql://user:password@host:3306/database
  user:password@tcp(host:3306)/database?parseTime=true           (MySQL driver DSN)
  sqlite:path/to/file.db, file:path/to/file.db?…, path/to/file.db (SQLite)
--driver postgres|mysql|sqlite says which when the form does not.`

var (
	mysqlNativeRE = regexp.MustCompile(`^[A-Za-z0-9]*\(`)
	sqliteFileRE  = regexp.MustCompile(`(?i)\.(db|db3|sqlite|sqlite3)$`)
)

// parseDB turns a database address into a GORM dialector. driver, when
// not empty, names the driver; otherwise the form does: a URL's scheme,
// a PostgreSQL key/value string, a MySQL driver DSN (user@tcp(…)/db), a
// sqlite:/file: address, or a path ending in .db, .sqlite or .sqlite3.
func parseDB(raw, driver string) (*dbAddr, error) {
	shown := maskDSN(raw)
	guessed, err := driverOf(raw)
	switch {
	case driver == "" && err != nil:
		return nil, usagef("--db %s: %v", shown, err)
	case driver == "":
		driver = guessed
	case driver != driverPostgres && driver != driverMySQL && driver != driverSQLite:
		return nil, usagef("--driver %q: want postgres, mysql or sqlite", driver)
	case urlPrefixRE.MatchString(raw) && err == nil && guessed != driver:
		return nil, usagef("--db %s is a %s address, but --driver says %s", shown, guessed, driver)
	}
	switch driver {
	case driverPostgres:
		return parsePostgres(raw)
	case driverMySQL:
		if urlPrefixRE.MatchString(raw) {
			return parseMySQLURL(raw)
		}
		return parseMySQLDSN(raw)
	}
	return parseSQLite(raw)
}

// driverOf tells the driver by the form of raw.
func driverOf(raw string) (string, error) {
	if m := urlPrefixRE.FindString(raw); m != "" {
		switch scheme := strings.ToLower(strings.TrimSuffix(m, "://")); scheme {
		case "postgres", "postgresql":
			return driverPostgres, nil
		case "mysql":
			return driverMySQL, nil
		case "sqlite", "sqlite3", "file":
			return driverSQLite, nil
		default:
			return "", fmt.Errorf("unsupported scheme %q: want postgres://, mysql:// or sqlite:", scheme)
		}
	}
	switch {
	case hasSQLitePrefix(raw):
		return driverSQLite, nil
	case kvFormRE.MatchString(raw):
		return driverPostgres, nil
	case strings.Contains(raw, "@") || mysqlNativeRE.MatchString(raw):
		return driverMySQL, nil
	case sqliteFileRE.MatchString(raw):
		return driverSQLite, nil
	}
	return "", errors.New("cannot tell which database this names: use one of the forms 'outbox help' lists, or pass --driver")
}

func hasSQLitePrefix(raw string) bool {
	l := strings.ToLower(raw)
	return strings.HasPrefix(l, "sqlite:") || strings.HasPrefix(l, "sqlite3:") || strings.HasPrefix(l, "file:")
}

func parsePostgres(raw string) (*dbAddr, error) {
	shown := maskDSN(raw)
	if urlPrefixRE.MatchString(raw) {
		if u, err := url.Parse(raw); err != nil || u.Host == "" {
			return nil, usagef("--db %s: not a valid PostgreSQL URL%s: want postgres://user:password@host:5432/database", shown, urlProblem(err))
		}
	} else if err := checkKeyValue(raw); err != nil {
		return nil, usagef("--db %s: %v: a PostgreSQL key/value string is host=… port=5432 user=… password=… dbname=…", shown, err)
	}
	cfg, err := pgconn.ParseConfig(raw)
	if err != nil {
		return nil, usagef("--db %s: not a valid PostgreSQL address: %s", shown, pgDetail(err))
	}
	return &dbAddr{dialector: postgres.Open(raw), driver: driverPostgres, shown: shown, secrets: []string{cfg.Password}}, nil
}

// pgDetail is pgconn's parse error without the address it echoes.
func pgDetail(err error) string {
	msg := err.Error()
	if strings.HasPrefix(msg, "cannot parse `") {
		if i := strings.LastIndex(msg, "`: "); i > 0 {
			return msg[i+3:]
		}
		return "cannot parse it"
	}
	return msg
}

func parseMySQLURL(raw string) (*dbAddr, error) {
	shown := maskDSN(raw)
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || strings.Trim(u.Path, "/") == "" {
		return nil, usagef("--db %s: not a valid MySQL URL%s: want mysql://user:password@host:3306/database", shown, urlProblem(err))
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
	cfg.Params = map[string]string{}
	for k, vs := range u.Query() {
		cfg.Params[k] = vs[len(vs)-1]
	}
	// Params the driver knows (tls, timeouts, …) are moved to their fields.
	parsed, err := mysql.ParseDSN(cfg.FormatDSN())
	if err != nil {
		return nil, usagef("--db %s: %v", shown, err)
	}
	return mysqlAddr(parsed, shown), nil
}

func parseMySQLDSN(raw string) (*dbAddr, error) {
	shown := maskDSN(raw)
	cfg, err := mysql.ParseDSN(raw)
	if err != nil {
		return nil, usagef("--db %s: not a valid MySQL DSN (%v): want user:password@tcp(host:3306)/database", shown, err)
	}
	return mysqlAddr(cfg, shown), nil
}

// mysqlAddr fixes what the outbox needs (parseTime, UTC) on cfg.
func mysqlAddr(cfg *mysql.Config, shown string) *dbAddr {
	cfg.ParseTime = true
	cfg.Loc = time.UTC // the outbox stores UTC
	delete(cfg.Params, "parseTime")
	delete(cfg.Params, "loc")
	return &dbAddr{dialector: mysqldriver.Open(cfg.FormatDSN()), driver: driverMySQL, shown: shown, secrets: []string{cfg.Passwd}}
}

func parseSQLite(raw string) (*dbAddr, error) {
	path := raw
	if hasSQLitePrefix(raw) {
		_, path, _ = strings.Cut(raw, ":")
		path = strings.TrimPrefix(path, "//")
	}
	file, query, _ := strings.Cut(path, "?")
	if file == "" {
		return nil, usagef("--db %s: a SQLite address is sqlite:path/to/file.db", maskDSN(raw))
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, usagef("--db %s: invalid parameters after '?'", maskDSN(raw))
	}
	if q.Get("_txlock") == "" {
		q.Set("_txlock", "immediate")
	}
	if q.Get("_busy_timeout") == "" {
		q.Set("_busy_timeout", "5000")
	}
	var secrets []string
	for k, vs := range q {
		if secretKeyRE.MatchString(k + "=") {
			secrets = append(secrets, vs...)
		}
	}
	return &dbAddr{dialector: sqliteDialector("file:" + file + "?" + q.Encode()), driver: driverSQLite,
		shown: "sqlite:" + file, secrets: secrets, file: file}, nil
}

// urlProblem says what is wrong with a URL that did not parse, without
// echoing any of it (the parser's own message quotes the URL).
func urlProblem(err error) string {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return ""
	}
	var ee url.EscapeError
	if errors.As(ue.Err, &ee) {
		return " (a bad %-escape: write % as %25, and @ : / ? # and spaces in a password percent-encoded)"
	}
	return " (write @ : / ? # % and spaces in a password percent-encoded, e.g. @ as %40)"
}

// checkKeyValue checks the syntax of a libpq key/value string: key=value
// pairs separated by spaces, a value either quoted with ' (\' and \\
// escaped) or ending at a space. It never echoes the string.
func checkKeyValue(s string) error {
	for i, n := 0, 1; ; n++ {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i == len(s) {
			return nil
		}
		j := i
		for j < len(s) && s[j] != '=' && !isSpace(s[j]) {
			j++
		}
		if j == i {
			return fmt.Errorf("pair %d has no key", n)
		}
		for j < len(s) && isSpace(s[j]) {
			j++
		}
		if j == len(s) || s[j] != '=' {
			return fmt.Errorf("pair %d is not key=value", n)
		}
		for j++; j < len(s) && isSpace(s[j]); j++ {
		}
		end, closed := libpqValueEnd(s, j)
		if !closed {
			return fmt.Errorf("pair %d has an unterminated quoted value", n)
		}
		i = end
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// open connects and checks the connection within ctx. A SQLite file must
// exist unless create is set (migrate creates it).
func (a *dbAddr) open(ctx context.Context, create bool) (*gorm.DB, error) {
	if a.driver == driverSQLite && !create && a.file != ":memory:" {
		if _, err := os.Stat(a.file); errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("SQLite database %s does not exist: check the path, or create it with 'outbox migrate'", a.file)
		}
	}
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
