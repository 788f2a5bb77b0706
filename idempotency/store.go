package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/sqldriver"
	"github.com/gormoutbox/outbox/internal/sqlmigrate"
)

// DefaultTableName is the table a Store uses unless WithTable says otherwise.
const DefaultTableName = "outbox_idempotency"

// Defaults of the options.
const (
	DefaultTTL   = 7 * 24 * time.Hour
	DefaultLease = 5 * time.Minute
)

// MaxKeyLen is the longest key, in characters.
const MaxKeyLen = 255

// Errors. Every error the package returns of these kinds wraps one of them.
var (
	// ErrInProgress is returned when another caller holds the key: its
	// function is running (or its holder died less than a lease ago). Retry
	// later; the key is not lost.
	ErrInProgress = errors.New("idempotency: key in progress")
	// ErrLeaseLost is returned by Do and SideEffect when fn took longer
	// than the lease and another caller took the key over: fn's effect has
	// happened, and may happen again through the other caller.
	ErrLeaseLost = errors.New("idempotency: lease lost while running")
	// ErrInvalidKey is returned for an empty key, or one over MaxKeyLen.
	ErrInvalidKey = errors.New("idempotency: invalid key")
	// ErrInvalidOption is wrapped by configuration errors of NewStore.
	ErrInvalidOption = errors.New("idempotency: invalid option")
)

// Store keeps idempotency records in a table of the application's
// database. It is safe for concurrent use.
type Store struct {
	db    *gorm.DB
	kind  dialect.Kind
	drv   sqldriver.Driver // kind's
	table string
	ttl   time.Duration
	lease time.Duration
}

// NewStore returns a Store on db (PostgreSQL, MySQL/MariaDB or SQLite).
// It fails with an error wrapping ErrInvalidOption on a bad option, or on
// a MySQL connection opened without parseTime=true; and with an error
// wrapping outbox.ErrNotMigrated when its table does not exist: create it
// with outbox.Migrate (the default table), idempotency.Migrate (a table
// named by WithTable) or the files of package migrations.
func NewStore(db *gorm.DB, opts ...Option) (*Store, error) {
	s, err := configure(db, opts)
	if err != nil {
		return nil, err
	}
	if err := dialect.CheckConn(db, ErrInvalidOption); err != nil {
		return nil, err
	}
	missing, err := dialect.MissingTables(db, s.table)
	if err != nil {
		return nil, fmt.Errorf("idempotency: checking table %s: %w", s.table, err)
	}
	if len(missing) > 0 {
		how := "run outbox.Migrate (or `outbox migrate`)"
		if s.table != DefaultTableName {
			how = fmt.Sprintf("run idempotency.Migrate with WithTable(%q) (or `outbox migrate --idempotency-table %s`)", s.table, s.table)
		}
		return nil, fmt.Errorf("idempotency: %w: missing table %s: %s", outbox.ErrNotMigrated, s.table, how)
	}
	return s, nil
}

// configure builds a Store from opts, without looking at the database.
func configure(db *gorm.DB, opts []Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: db is nil", ErrInvalidOption)
	}
	kind, err := dialect.Of(db)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
	}
	o, err := applyOptions(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{
		db:    db.Session(&gorm.Session{NewDB: true, SkipDefaultTransaction: true}),
		kind:  kind,
		drv:   kind.Driver(),
		table: o.table,
		ttl:   o.ttl,
		lease: o.lease,
	}
	return s, nil
}

// Migrate creates, if they do not exist, the idempotency table named by
// opts (WithTable; default DefaultTableName, which outbox.Migrate creates
// too) and its index, by running the files of package migrations. The
// other options are validated and otherwise do not matter. Like
// outbox.Migrate it is idempotent and safe to run from several processes
// at once.
func Migrate(ctx context.Context, db *gorm.DB, opts ...Option) error {
	s, err := configure(db, opts)
	if err != nil {
		return err
	}
	return s.Migrate(ctx)
}

// Migrate applies the migrations of the store's table that it lacks (see
// package migrations): a table created by an older version gets the newer
// files. NewStore requires the table to exist; create it with Migrate.
func (s *Store) Migrate(ctx context.Context) error {
	err := sqlmigrate.Apply(s.db.WithContext(ctx), []string{"0002_outbox_idempotency"}, map[string]string{DefaultTableName: s.table})
	if err != nil {
		return fmt.Errorf("idempotency: migrate: %w", err)
	}
	return nil
}

// Table returns the store's table name.
func (s *Store) Table() string { return s.table }

func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: not valid UTF-8", ErrInvalidKey)
	}
	if n := utf8.RuneCountInString(key); n > MaxKeyLen {
		return fmt.Errorf("%w: %d characters, at most %d", ErrInvalidKey, n, MaxKeyLen)
	}
	return nil
}

// Purge deletes expired records (succeeded keys past their TTL, and keys
// whose holder died), in batches, and reports how many it deleted.
func (s *Store) Purge(ctx context.Context) (int64, error) {
	db := s.db.WithContext(ctx)
	now, args := s.kind.Now()
	var total int64
	for {
		var keys []string
		if err := db.Table(s.table).Where("expires_at < "+now, args...).Limit(1000).Pluck("idempotency_key", &keys).Error; err != nil {
			return total, fmt.Errorf("idempotency: purge: %w", err)
		}
		if len(keys) == 0 {
			return total, nil
		}
		now, args = s.kind.Now()
		res := db.Exec("DELETE FROM "+s.table+" WHERE idempotency_key IN ? AND expires_at < "+now, append([]any{keys}, args...)...)
		if res.Error != nil {
			return total, fmt.Errorf("idempotency: purge: %w", res.Error)
		}
		total += res.RowsAffected
		if len(keys) < 1000 {
			return total, nil
		}
	}
}
