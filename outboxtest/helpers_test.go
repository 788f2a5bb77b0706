package outboxtest_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/outboxtestenv"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/outboxtest"
)

// TestMain removes the examples' SQLite files (see outboxtestenv.Main).
func TestMain(m *testing.M) { outboxtestenv.Main(m) }

// fakeT records what the helpers report, so that tests can check that an
// assertion fails, and with what message. Like rivertest's MockT, its
// FailNow does not stop the goroutine.
type fakeT struct {
	mu      sync.Mutex
	errors  []string
	logs    []string
	stopped bool
}

func (f *fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) FailNow() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = true
}

func (f *fakeT) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeT) message() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.errors, "\n")
}

// requirePassed fails t if the helper reported anything.
func (f *fakeT) requirePassed(t *testing.T) {
	t.Helper()
	if msg := f.message(); msg != "" || f.stopped {
		t.Fatalf("the helper failed (stopped: %v):\n%s", f.stopped, msg)
	}
}

// requireFailed fails t unless the helper reported a failure containing
// every part, and stopped the test when fatal.
func (f *fakeT) requireFailed(t *testing.T, fatal bool, parts ...string) string {
	t.Helper()
	msg := f.message()
	if msg == "" {
		t.Fatalf("the helper did not fail")
	}
	if f.stopped != fatal {
		t.Errorf("FailNow called: %v, want %v", f.stopped, fatal)
	}
	for _, p := range parts {
		if !strings.Contains(msg, p) {
			t.Errorf("the failure message does not contain %q:\n%s", p, msg)
		}
	}
	return msg
}

// Order emits order.created from AfterCreate, as an application would.
type Order struct {
	ID       uint `gorm:"primaryKey"`
	Customer string
	Total    int
}

func (o *Order) AfterCreate(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{
		Type:          "order.created",
		AggregateType: "order",
		AggregateID:   fmt.Sprint(o.ID),
		PartitionKey:  "customer:" + o.Customer,
		Payload:       map[string]any{"id": o.ID, "customer": o.Customer, "total": o.Total},
		Headers:       map[string]string{"source": "test"},
	})
}

// eachDB runs fn per dialect on a database of outboxTestDB.
func eachDB(t *testing.T, table string, fn func(t *testing.T, db *gorm.DB)) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) { fn(t, outboxTestDB(t, d, table)) })
	}
}

// outboxTestDB is outboxtest.DB on the dialect (skipped, or failed with
// OUTBOX_REQUIRE_SERVICES=1, when its server is not configured), with the
// plugin of table (the default when empty), the Order table and the SQL
// log of OUTBOX_TEST_SQL_LOG.
func outboxTestDB(t testing.TB, dialect, table string) *gorm.DB {
	t.Helper()
	return outboxtestenv.DB(t, dialect,
		outboxtest.Plugin(&outbox.Plugin{TableName: table}),
		outboxtest.AutoMigrate(&Order{}),
		outboxtest.GormConfig(func(c *gorm.Config) { c.Logger = testenv.Config().Logger }))
}

// sqliteDB is outboxTestDB on SQLite with the default table.
func sqliteDB(t testing.TB) *gorm.DB { return outboxTestDB(t, testenv.SQLite, "") }

func createOrder(t testing.TB, db *gorm.DB, customer string, total int) *Order {
	t.Helper()
	o := &Order{Customer: customer, Total: total}
	if err := db.Create(o).Error; err != nil {
		t.Fatalf("creating an order: %v", err)
	}
	return o
}

func emit(t testing.TB, db *gorm.DB, events ...outbox.Event) {
	t.Helper()
	if err := db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, events...) }); err != nil {
		t.Fatalf("emitting: %v", err)
	}
}

// newMux returns an inproc.Mux on db with its idempotency table.
func newMux(t testing.TB, db *gorm.DB) *inproc.Mux {
	t.Helper()
	store, err := idempotency.NewStore(db)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return inproc.NewMux(store, inproc.WithLogger(testenv.Logger(t)))
}

// openSQLite returns a fresh SQLite database.
func openSQLite(t testing.TB) *gorm.DB { return testenv.Open(t, testenv.SQLite) }
