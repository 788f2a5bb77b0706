// Package dialect names the supported database families (Kind) and finds
// the sqldriver.Driver of a connection: every SQL fact that differs by
// database lives in a driver (package sqldriver and its folders), and
// Kind's methods are shorthands for its driver's.
package dialect

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
	"github.com/gormoutbox/outbox/internal/sqldriver/mysql"
	"github.com/gormoutbox/outbox/internal/sqldriver/postgres"
	"github.com/gormoutbox/outbox/internal/sqldriver/sqlite"
)

// Kind is a supported database family.
type Kind int

// The supported families.
const (
	Postgres Kind = iota + 1
	MySQL         // MySQL 8 and MariaDB
	SQLite
)

// drivers holds the driver of each Kind, by Kind. Adding a dialect: a
// Kind constant, its driver here.
var drivers = [...]sqldriver.Driver{
	Postgres: postgres.Driver{},
	MySQL:    mysql.Driver{},
	SQLite:   sqlite.Driver{},
}

// Kinds returns every supported Kind.
func Kinds() []Kind {
	out := make([]Kind, 0, len(drivers))
	for k, d := range drivers {
		if d != nil {
			out = append(out, Kind(k))
		}
	}
	return out
}

// Of returns the Kind of db's dialector, or an error naming a dialector
// that no driver serves.
func Of(db *gorm.DB) (Kind, error) {
	name := db.Dialector.Name()
	for k, d := range drivers {
		if d != nil && contains(d.DialectorNames(), name) {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("unsupported database dialect %q (want %s)", name, supported())
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}

func supported() string {
	var names []string
	for _, k := range Kinds() {
		names = append(names, k.String())
	}
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Open returns the driver of db's dialector; see Of.
func Open(db *gorm.DB) (sqldriver.Driver, error) {
	k, err := Of(db)
	if err != nil {
		return nil, err
	}
	return k.Driver(), nil
}

// For returns the driver of k, or an error naming a Kind that has none.
func For(k Kind) (sqldriver.Driver, error) {
	if k <= 0 || int(k) >= len(drivers) || drivers[k] == nil {
		return nil, fmt.Errorf("unsupported database dialect Kind(%d) (want %s)", int(k), supported())
	}
	return drivers[k], nil
}

// Driver returns the driver of k. It panics on a Kind that is not one of
// the constants (a Kind is only ever made by Of): there is no fallback.
func (k Kind) Driver() sqldriver.Driver {
	d, err := For(k)
	if err != nil {
		panic("dialect: " + err.Error())
	}
	return d
}

// String returns the driver's name of k (its migrations directory), or
// Kind(n) for a Kind that has no driver.
func (k Kind) String() string {
	if d, err := For(k); err == nil {
		return d.Name()
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Time returns t as a value to bind where the database compares it with
// its own clock (sqldriver.Clock).
func (k Kind) Time(t time.Time) any { return k.Driver().Time(t) }

// Now returns an SQL expression for the current time by the database clock,
// and its arguments. SQLite has no server clock: the process clock is bound.
func (k Kind) Now() (string, []any) { return k.Driver().Now() }

// NowPlus returns an SQL expression for now plus d, and its arguments.
func (k Kind) NowPlus(d time.Duration) (string, []any) { return k.Driver().NowPlus(d) }

// InsertIgnore returns the clause that makes an INSERT skip rows whose
// unique column col already holds the value (sqldriver.Statements).
func (k Kind) InsertIgnore(col string) string { return k.Driver().InsertIgnore(col) }

// InsertIgnoreCounted reports whether the affected-row count of an
// InsertIgnore statement tells an inserted row from a skipped one
// (sqldriver.Statements).
func (k Kind) InsertIgnoreCounted() bool { return k.Driver().InsertIgnoreCounted() }

// SecondsSince returns an SQL expression for the seconds elapsed since the
// time expression expr, by the database clock.
func (k Kind) SecondsSince(expr string) string { return k.Driver().SecondsSince(expr) }

// WholeMinutesSince returns an SQL expression for the whole minutes
// elapsed since the time expression expr (see sqldriver.Clock).
func (k Kind) WholeMinutesSince(expr string) string { return k.Driver().WholeMinutesSince(expr) }

// Upsert returns the clause that makes an INSERT update cols (to the
// values it tried to insert) when a row with the same key column exists.
func (k Kind) Upsert(key string, cols ...string) string { return k.Driver().Upsert(key, cols...) }

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
