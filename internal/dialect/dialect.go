// Package dialect holds the few facts about PostgreSQL, MySQL/MariaDB and
// SQLite that both the write path and the relay need: how to say "now" by
// the database clock, how to bind a time so that the database compares it
// correctly, and how to ignore a duplicate insert.
package dialect

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"gorm.io/gorm"
)

// Kind is a supported database family.
type Kind int

// The supported families.
const (
	Postgres Kind = iota + 1
	MySQL         // MySQL 8 and MariaDB
	SQLite
)

// Of returns the Kind of db's dialector.
func Of(db *gorm.DB) (Kind, error) {
	switch name := db.Dialector.Name(); name {
	case "postgres", "pgx":
		return Postgres, nil
	case "mysql":
		return MySQL, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	default:
		return 0, fmt.Errorf("unsupported database dialect %q (want postgres, mysql or sqlite)", name)
	}
}

// String returns the migrations directory name of k.
func (k Kind) String() string {
	switch k {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "unknown"
}

// sqliteTime is the text form of times in SQLite: UTC with a fixed-width
// fraction, so that text comparison orders times correctly. The
// mattn/go-sqlite3 driver parses it back into a time.Time.
const sqliteTime = "2006-01-02 15:04:05.000000000+00:00"

// mysqlTime is a DATETIME(6) literal in UTC, independent of the driver's loc.
const mysqlTime = "2006-01-02 15:04:05.000000"

// Time returns t as a value to bind where the database compares it with
// its own clock.
func (k Kind) Time(t time.Time) any {
	switch k {
	case SQLite:
		return t.UTC().Format(sqliteTime)
	case MySQL:
		return t.UTC().Format(mysqlTime)
	default:
		return t
	}
}

// Now returns an SQL expression for the current time by the database clock,
// and its arguments. SQLite has no server clock: the process clock is bound.
func (k Kind) Now() (string, []any) {
	switch k {
	case Postgres:
		return "clock_timestamp()", nil
	case MySQL:
		return "UTC_TIMESTAMP(6)", nil
	default:
		return "?", []any{k.Time(time.Now())}
	}
}

// NowPlus returns an SQL expression for now plus d, and its arguments.
func (k Kind) NowPlus(d time.Duration) (string, []any) {
	us := d.Microseconds()
	switch k {
	case Postgres:
		return "clock_timestamp() + ? * interval '1 microsecond'", []any{us}
	case MySQL:
		return "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND", []any{us}
	default:
		return "?", []any{k.Time(time.Now().Add(d))}
	}
}

// InsertIgnore returns the clause that makes an INSERT into table skip rows
// whose unique column col already holds the value, without failing the
// transaction and without hiding other errors (MySQL's INSERT IGNORE would).
func (k Kind) InsertIgnore(col string) string {
	switch k {
	case MySQL:
		return " ON DUPLICATE KEY UPDATE " + col + " = " + col
	default:
		return " ON CONFLICT (" + col + ") DO NOTHING"
	}
}

// InsertIgnoreCounted reports whether the affected-row count of an
// InsertIgnore statement tells an inserted row (1) from a skipped one (0)
// whatever the connection's settings. It does not on MySQL: with
// clientFoundRows=true (a common DSN flag) a skipped row counts 1, as the
// row that ON DUPLICATE KEY UPDATE found; read what the row holds instead.
func (k Kind) InsertIgnoreCounted() bool { return k != MySQL }

// SecondsSince returns an SQL expression for the seconds elapsed since the
// time expression expr, by the database clock.
func (k Kind) SecondsSince(expr string) string {
	switch k {
	case Postgres:
		return "EXTRACT(EPOCH FROM (clock_timestamp() - " + expr + "))"
	case MySQL:
		return "(TIMESTAMPDIFF(MICROSECOND, " + expr + ", UTC_TIMESTAMP(6)) / 1000000.0)"
	default:
		return "((julianday('now') - julianday(" + expr + ")) * 86400.0)"
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// CheckIdent reports whether name is a plain SQL identifier of at most max
// bytes (letters, digits, underscores, not starting with a digit), safe to
// put into SQL text unquoted.
func CheckIdent(name string, max int) error {
	if !identRE.MatchString(name) {
		return fmt.Errorf("%q is not a plain SQL identifier (letters, digits and underscores, not starting with a digit)", name)
	}
	if len(name) > max {
		return fmt.Errorf("%q is longer than %d characters", name, max)
	}
	return nil
}

// Upsert returns the clause that makes an INSERT update cols (to the
// values it tried to insert) when a row with the same key column exists.
func (k Kind) Upsert(key string, cols ...string) string {
	var sb strings.Builder
	if k == MySQL {
		sb.WriteString(" ON DUPLICATE KEY UPDATE ")
		for i, c := range cols {
			if i > 0 {
				sb.WriteString(", ")
			}
			sb.WriteString(c + " = VALUES(" + c + ")")
		}
		return sb.String()
	}
	sb.WriteString(" ON CONFLICT (" + key + ") DO UPDATE SET ")
	for i, c := range cols {
		if i > 0 {
			sb.WriteString(", ")
		}
		sb.WriteString(c + " = excluded." + c)
	}
	return sb.String()
}
