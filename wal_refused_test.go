package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// outboxCallbacks are the names of every callback the Plugin registers
// (plugin.go, track_callbacks.go, model.go's table check), per chain.
var outboxCallbacks = map[string][]string{
	"create": {"outbox:begin", "outbox:flush", "outbox:clear", "outbox:track_before_create", "outbox:track_create", "outbox:table_check"},
	"update": {"outbox:begin", "outbox:flush", "outbox:clear", "outbox:track_before_update", "outbox:track_update", "outbox:table_check"},
	"delete": {"outbox:begin", "outbox:flush", "outbox:clear", "outbox:track_before_delete", "outbox:track_delete", "outbox:table_check"},
	"query":  {"outbox:table_check"},
	"row":    {"outbox:track_raw", "outbox:table_check"},
	"raw":    {"outbox:track_raw"},
}

// registeredCallbacks lists the outbox callbacks registered on db.
func registeredCallbacks(db *gorm.DB) []string {
	cb := db.Callback()
	chains := map[string]interface{ Get(string) func(*gorm.DB) }{
		"create": cb.Create(), "update": cb.Update(), "delete": cb.Delete(),
		"query": cb.Query(), "row": cb.Row(), "raw": cb.Raw(),
	}
	var found []string
	for chain, names := range outboxCallbacks {
		for _, name := range names {
			if chains[chain].Get(name) != nil {
				found = append(found, chain+" "+name)
			}
		}
	}
	slices.Sort(found)
	return found
}

// A Use refused in WAL mode leaves db as it was: no outbox callback, and
// a Recorder model's Create in a transaction sends the statements it sends
// on a twin db that never had Use called (the business row, nothing else:
// before the fix, a refused Use on PostgreSQL had left its callbacks on db,
// which wrote the event as a WAL message that no slot keeps). PostgreSQL
// is refused by the shared server's wal_level (replica), or without the
// slot; MySQL and SQLite as not PostgreSQL.
func TestWALRefusedUseLeavesDBAsItWas(t *testing.T) {
	configs := map[string]func() *outbox.Plugin{
		"WAL":                func() *outbox.Plugin { return &outbox.Plugin{WAL: &outbox.WAL{}} },
		"WAL, AutoMigrate":   func() *outbox.Plugin { return &outbox.Plugin{WAL: &outbox.WAL{}, AutoMigrate: true} },
		"WAL, another table": func() *outbox.Plugin { return &outbox.Plugin{WAL: &outbox.WAL{}, TableName: "refused_events"} },
		"WAL, table, migrating": func() *outbox.Plugin {
			return &outbox.Plugin{WAL: &outbox.WAL{}, TableName: "refused_events", AutoMigrate: true}
		},
	}
	for name, plugin := range configs {
		t.Run(name, func(t *testing.T) {
			testenv.Each(t, func(t *testing.T, db *gorm.DB) {
				twin := testenv.Open(t, db.Dialector.Name())
				err := db.Use(plugin())
				if !errors.Is(err, outbox.ErrWALNotReady) {
					t.Fatalf("Use in WAL mode on the shared %s server: %v, want ErrWALNotReady", db.Dialector.Name(), err)
				}
				if got := registeredCallbacks(db); len(got) != 0 {
					t.Errorf("callbacks left on db by a refused Use: %v", got)
				}
				sent, twinSent := createRecorded(t, db), createRecorded(t, twin)
				if !slices.Equal(sent, twinSent) {
					t.Errorf("a Create after a refused Use sent\n  %s\nwhile a db without Use sent\n  %s",
						strings.Join(sent, "\n  "), strings.Join(twinSent, "\n  "))
				}
				var n int64
				must(t, db.Model(&Account{}).Where("owner = ?", "ada").Count(&n).Error)
				if n != 1 {
					t.Errorf("%d accounts after the Create, want 1", n)
				}
			})
		})
	}
}

// createRecorded creates an Account with a recorded event in a transaction
// on db and returns the statements sent to the server meanwhile.
func createRecorded(t *testing.T, db *gorm.DB) []string {
	t.Helper()
	must(t, db.AutoMigrate(&Account{}))
	rec := &recordingPool{pool: db.ConnPool}
	s := db.Session(&gorm.Session{NewDB: true})
	s.Statement.ConnPool = rec
	err := s.Transaction(func(tx *gorm.DB) error {
		acc := Account{Owner: "ada"}
		acc.Record(outbox.Event{Type: "account.opened", Payload: map[string]int{"n": 1}})
		return tx.Create(&acc).Error
	})
	must(t, err)
	return rec.sent
}

// recordingPool is a gorm.ConnPool that records the statements sent
// through it and through the transactions it begins.
type recordingPool struct {
	pool gorm.ConnPool
	mu   sync.Mutex
	sent []string
}

func (r *recordingPool) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, fmt.Sprintf(format, args...))
}

func (r *recordingPool) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	r.note("prepare %s", query)
	return r.pool.PrepareContext(ctx, query)
}

func (r *recordingPool) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.note("exec %s", query)
	return r.pool.ExecContext(ctx, query, args...)
}

func (r *recordingPool) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r.note("query %s", query)
	return r.pool.QueryContext(ctx, query, args...)
}

func (r *recordingPool) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	r.note("query %s", query)
	return r.pool.QueryRowContext(ctx, query, args...)
}

// BeginTx implements gorm.ConnPoolBeginner.
func (r *recordingPool) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	r.note("begin")
	db, ok := r.pool.(*sql.DB)
	if !ok {
		return nil, fmt.Errorf("recordingPool: %T is not a *sql.DB", r.pool)
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &recordingTx{parent: r, tx: tx}, nil
}

// recordingTx is a transaction of a recordingPool: a gorm.ConnPool and a
// gorm.TxCommitter that records in its pool.
type recordingTx struct {
	parent *recordingPool
	tx     *sql.Tx
}

func (r *recordingTx) note(format string, args ...any) { r.parent.note(format, args...) }

func (r *recordingTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	r.note("exec %s", query)
	return r.tx.ExecContext(ctx, query, args...)
}

func (r *recordingTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	r.note("query %s", query)
	return r.tx.QueryContext(ctx, query, args...)
}

func (r *recordingTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	r.note("query %s", query)
	return r.tx.QueryRowContext(ctx, query, args...)
}

func (r *recordingTx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	r.note("prepare %s", query)
	return r.tx.PrepareContext(ctx, query)
}

func (r *recordingTx) Commit() error   { r.note("commit"); return r.tx.Commit() }
func (r *recordingTx) Rollback() error { r.note("rollback"); return r.tx.Rollback() }

// A Use refused because a callback of the Plugin conflicts with one of
// the application's leaves db as it was too: GORM keeps a callback whose
// registration failed and then runs no callback of its chain, so that,
// before the fix, every Create on db inserted nothing and said nothing.
func TestUseRefusedByCallbackConflictLeavesDBAsItWas(t *testing.T) {
	db := openSQLite(t)
	// Contradictory: after the commit, yet before the plugin's callback
	// that runs after the transaction begins.
	must(t, db.Callback().Create().After("gorm:commit_or_rollback_transaction").Before("outbox:begin").
		Register("app:audit", func(*gorm.DB) {}))
	err := db.Use(&outbox.Plugin{TableName: "conflict_events", AutoMigrate: true})
	if err == nil || !strings.Contains(err.Error(), "conflicting callback") {
		t.Fatalf("Use with a conflicting callback: %v, want the conflict", err)
	}
	if got := registeredCallbacks(db); len(got) != 0 {
		t.Errorf("callbacks left on db by a refused Use: %v", got)
	}
	if db.Callback().Create().Get("app:audit") == nil {
		t.Error("the application's own callback was removed")
	}
	must(t, db.AutoMigrate(&Account{}))
	must(t, db.Create(&Account{Owner: "ada"}).Error)
	var n int64
	must(t, db.Model(&Account{}).Count(&n).Error)
	if n != 1 {
		t.Errorf("%d accounts after a Create, want 1", n)
	}
}
