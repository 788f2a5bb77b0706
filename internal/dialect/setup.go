package dialect

import (
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver"
)

// ErrNoParseTime is returned by CheckConn for a MySQL connection opened
// without parseTime=true.
var ErrNoParseTime = sqldriver.ErrNoParseTime

// CheckConn verifies that db's connection settings suit the library, by
// asking the driver (one query on MySQL, none elsewhere). A setting it
// cannot work with is returned wrapping both invalid (the caller's
// configuration-error sentinel) and the setting's error (ErrNoParseTime);
// a failure to ask is returned wrapping neither. On MySQL it requires
// parseTime=true; the driver's loc may be anything, because the library
// binds and compares UTC itself and reads its times back through
// StoredTime.
func CheckConn(db *gorm.DB, invalid error) error {
	d, err := Open(db)
	if err != nil {
		return fmt.Errorf("%w: %w", invalid, err)
	}
	err = d.CheckConn(db)
	if errors.Is(err, ErrNoParseTime) {
		return fmt.Errorf("%w: %w", invalid, err)
	}
	return err
}

// StoredTime returns the instant that a time column the library wrote
// holds, given the value the driver scanned from it. MySQL's DATETIME has
// no zone: the library stores UTC, while the driver reads the wall clock
// in its loc (loc=Local is common), so the wall clock is taken as UTC. The
// other databases store an instant; t is returned as it is.
func (k Kind) StoredTime(t time.Time) time.Time { return k.Driver().StoredTime(t) }

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
func (k Kind) OutboxTables(table string) []string { return k.Driver().OutboxTables(table) }

// MissingTables returns those of tables that do not exist in db, looked up
// as the library's SQL names them (unquoted: PostgreSQL folds the name to
// lower case and resolves it through the search_path; SQLite ignores case;
// MySQL looks in the current database).
func MissingTables(db *gorm.DB, tables ...string) ([]string, error) {
	d, err := Open(db)
	if err != nil {
		return nil, err
	}
	db = db.Session(&gorm.Session{NewDB: true})
	var missing []string
	for _, t := range tables {
		ok, err := d.TableExists(db, t)
		if err != nil {
			return nil, fmt.Errorf("looking up table %s: %w", t, err)
		}
		if !ok {
			missing = append(missing, t)
		}
	}
	return missing, nil
}
