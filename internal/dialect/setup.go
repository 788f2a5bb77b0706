package dialect

import (
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// ErrNoParseTime is returned by CheckConn for a MySQL connection opened
// without parseTime=true.
var ErrNoParseTime = errors.New("the MySQL DSN lacks parseTime=true: the driver returns DATETIME columns as text, " +
	"which GORM cannot read into time.Time; add parseTime=true to the DSN (any loc works)")

// CheckConn verifies that db's connection settings suit the library, by
// asking the driver (one query on MySQL, none elsewhere). A setting it
// cannot work with is returned wrapping both invalid (the caller's
// configuration-error sentinel) and the setting's error (ErrNoParseTime);
// a failure to ask is returned wrapping neither. On MySQL it requires
// parseTime=true; the driver's loc may be anything, because the library
// binds and compares UTC itself and reads its times back through
// StoredTime.
func CheckConn(db *gorm.DB, invalid error) error {
	k, err := Of(db)
	if err != nil {
		return fmt.Errorf("%w: %w", invalid, err)
	}
	if k != MySQL {
		return nil
	}
	var v any
	// A DATETIME comes back as time.Time with parseTime=true, as text
	// without it.
	err = db.Session(&gorm.Session{NewDB: true}).Raw("SELECT CAST('2000-01-01 00:00:00' AS DATETIME)").Row().Scan(&v)
	if err != nil {
		return fmt.Errorf("outbox: probing the MySQL connection's settings: %w", err)
	}
	if _, ok := v.(time.Time); !ok {
		return fmt.Errorf("%w: %w", invalid, ErrNoParseTime)
	}
	return nil
}

// StoredTime returns the instant that a time column the library wrote
// holds, given the value the driver scanned from it. MySQL's DATETIME has
// no zone: the library stores UTC, while the driver reads the wall clock
// in its loc (loc=Local is common), so the wall clock is taken as UTC. The
// other databases store an instant; t is returned as it is.
func (k Kind) StoredTime(t time.Time) time.Time {
	if k != MySQL || t.IsZero() {
		return t
	}
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, t.Nanosecond(), time.UTC)
}

// StoredTimePtr is StoredTime for a nullable column.
func (k Kind) StoredTimePtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := k.StoredTime(*t)
	return &u
}

// OutboxTables returns the tables that the migrations of the outbox table
// named table create on k: the table, its heartbeats table <table>_relays
// and, on MySQL, <table>_keys, which orders the writers of a partition key.
func (k Kind) OutboxTables(table string) []string {
	tables := []string{table, table + "_relays"}
	if k == MySQL {
		tables = append(tables, table+"_keys")
	}
	return tables
}

// MissingTables returns those of tables that do not exist in db, looked up
// as the library's SQL names them (unquoted: PostgreSQL folds the name to
// lower case and resolves it through the search_path; SQLite ignores case;
// MySQL looks in the current database).
func MissingTables(db *gorm.DB, tables ...string) ([]string, error) {
	k, err := Of(db)
	if err != nil {
		return nil, err
	}
	var q string
	switch k {
	case Postgres:
		q = "SELECT CASE WHEN to_regclass(?) IS NULL THEN 0 ELSE 1 END"
	case MySQL:
		q = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
	default:
		q = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ? COLLATE NOCASE"
	}
	db = db.Session(&gorm.Session{NewDB: true})
	var missing []string
	for _, t := range tables {
		var n int
		if err := db.Raw(q, t).Row().Scan(&n); err != nil {
			return nil, fmt.Errorf("looking up table %s: %w", t, err)
		}
		if n == 0 {
			missing = append(missing, t)
		}
	}
	return missing, nil
}
