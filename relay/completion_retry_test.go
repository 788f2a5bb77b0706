package relay_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	mysqldriver "gorm.io/driver/mysql"
	pgdriver "gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// throughProxy opens a fresh database of the dialect twice: directly, for
// the test, and through a proxy that can cut the connections, for the
// relay.
func throughProxy(t *testing.T, dialect string) (direct, proxied *gorm.DB, p *testenv.Proxy) {
	t.Helper()
	dsn := testenv.DSN(t, dialect)
	var open func(dsn string) gorm.Dialector
	var target string
	var via func(addr string) string
	switch dialect {
	case testenv.Postgres:
		u, err := url.Parse(dsn)
		must(t, err)
		target, open = u.Host, pgdriver.Open
		via = func(addr string) string { v := *u; v.Host = addr; return v.String() }
	case testenv.MySQL:
		cfg, err := mysql.ParseDSN(dsn)
		must(t, err)
		target, open = cfg.Addr, mysqldriver.Open
		via = func(addr string) string { c := cfg.Clone(); c.Addr = addr; return c.FormatDSN() }
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		target += map[string]string{testenv.Postgres: ":5432", testenv.MySQL: ":3306"}[dialect]
	}
	p = testenv.NewProxy(t, target)
	for _, d := range []struct {
		db  **gorm.DB
		dsn string
	}{{&direct, dsn}, {&proxied, via(p.Addr())}} {
		db, err := gorm.Open(open(d.dsn), testenv.Config())
		must(t, err)
		sqlDB, err := db.DB()
		must(t, err)
		t.Cleanup(func() { _ = sqlDB.Close() })
		must(t, db.Use(&outbox.Plugin{AutoMigrate: d.db == &direct}))
		*d.db = db
	}
	return direct, proxied, p
}

// cutAfterPublish is a publisher that delivers, then cuts the relay's
// database connections for the given time, so that the completion fails.
func cutAfterPublish(p *testenv.Proxy, outage time.Duration, restored chan<- struct{}) relay.PublisherFunc {
	var once sync.Once
	return func(context.Context, *outbox.Envelope) error {
		once.Do(func() {
			p.Cut()
			time.AfterFunc(outage, func() { p.Restore(); close(restored) })
		})
		return nil
	}
}

// A delivered event whose completion fails for a moment (the connection is
// cut right after Publish returned, on its last attempt) is recorded
// published: the completion is retried within the lease.
func TestCompletionIsRetriedAfterAConnectionCut(t *testing.T) {
	for _, dialect := range []string{testenv.Postgres, testenv.MySQL} {
		t.Run(dialect, func(t *testing.T) {
			direct, proxied, p := throughProxy(t, dialect)
			emitN(t, direct, 1, event)
			restored := make(chan struct{})
			r := newRelay(t, proxied, cutAfterPublish(p, 300*time.Millisecond, restored),
				relay.WithMaxAttempts(1), relay.WithLease(2*time.Second), relay.WithListen(false))
			res, err := r.RunOnce(t.Context())
			if err != nil || res.Published != 1 {
				t.Errorf("RunOnce: %+v, %v; want the event recorded published", res, err)
			}
			<-restored
			time.Sleep(2500 * time.Millisecond) // past the lease: a rescue would find it
			_, err = r.RunOnce(t.Context())
			must(t, err)
			row := statusOf(t, direct, event(0).ID)
			if row.Status != outbox.StatusPublished || row.Attempts != 1 {
				t.Errorf("delivered event: status %s, attempts %d, error %v; want published after 1 attempt",
					row.Status, row.Attempts, deref(row.LastError))
			}
		})
	}
}

// When the database stays out of reach longer than the lease, the relay
// that delivered the event records it published when the database is
// back, rather than rescuing its own claim as "lease expired" (dead on
// the last attempt).
func TestKnownOutcomeIsRecordedAfterALongOutage(t *testing.T) {
	for _, dialect := range []string{testenv.Postgres, testenv.MySQL} {
		t.Run(dialect, func(t *testing.T) {
			direct, proxied, p := throughProxy(t, dialect)
			emitN(t, direct, 1, event)
			restored := make(chan struct{})
			var dead atomic.Int64
			r := newRelay(t, proxied, cutAfterPublish(p, 2500*time.Millisecond, restored),
				relay.WithMaxAttempts(1), relay.WithLease(time.Second), relay.WithListen(false),
				relay.WithOnDead(func(context.Context, *outbox.Envelope, error) { dead.Add(1) }))
			if _, err := r.RunOnce(t.Context()); err == nil {
				t.Error("RunOnce reported no error though the outcome could not be recorded")
			}
			<-restored
			_, err := r.RunOnce(t.Context())
			must(t, err)
			row := statusOf(t, direct, event(0).ID)
			if row.Status != outbox.StatusPublished || row.Attempts != 1 || dead.Load() != 0 {
				t.Errorf("delivered event: status %s, attempts %d, error %v, OnDead %d; want published",
					row.Status, row.Attempts, deref(row.LastError), dead.Load())
			}
		})
	}
}

// Fencing: when another relay rescues the claim before the relay that
// delivered it reaches the database again, the late outcome is refused;
// the other relay's rescue and redelivery stand.
func TestLateOutcomeYieldsToAnotherRelaysRescue(t *testing.T) {
	for _, dialect := range []string{testenv.Postgres, testenv.MySQL} {
		t.Run(dialect, func(t *testing.T) {
			direct, proxied, p := throughProxy(t, dialect)
			emitN(t, direct, 1, event)
			restored := make(chan struct{})
			a := newRelay(t, proxied, cutAfterPublish(p, 2500*time.Millisecond, restored),
				relay.WithWorkerID("a"), relay.WithMaxAttempts(2), relay.WithLease(time.Second), relay.WithListen(false))
			if _, err := a.RunOnce(t.Context()); err == nil {
				t.Error("RunOnce reported no error though the outcome could not be recorded")
			}
			// b rescues a's expired claim (spending its attempt) and delivers.
			b := newRelay(t, direct, newRecorder(), relay.WithWorkerID("b"), relay.WithMaxAttempts(2))
			for deadline := time.Now().Add(2 * time.Second); ; {
				res, err := b.RunOnce(t.Context())
				must(t, err)
				if res.Published == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the other relay: %+v, want the rescued event delivered", res)
				}
				time.Sleep(20 * time.Millisecond)
			}
			<-restored
			res, err := a.RunOnce(t.Context())
			must(t, err)
			if res.Published != 0 {
				t.Errorf("the relay whose claim was rescued: %+v", res)
			}
			row := statusOf(t, direct, event(0).ID)
			// claimed by a (1), rescued by b (2), claimed by b (3)
			if row.Status != outbox.StatusPublished || row.ClaimVersion != 3 || row.Attempts != 2 || row.LockedBy != nil {
				t.Errorf("row %+v", row)
			}
		})
	}
}

// The same, on every dialect (SQLite included, where the completion can
// fail when another process holds the write lock past the busy timeout):
// completion statements fail for a while, injected by a GORM callback.
func TestCompletionFailuresAreRetried(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		var failUntil atomic.Int64
		failCompletions(t, db, func() bool { return time.Now().UnixNano() < failUntil.Load() })
		emitN(t, db, 2, event)
		var dead atomic.Int64
		r := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil }),
			relay.WithMaxAttempts(1), relay.WithLease(time.Second), relay.WithBatchSize(1),
			relay.WithOnDead(func(context.Context, *outbox.Envelope, error) { dead.Add(1) }))

		// A short failure, within the lease.
		failUntil.Store(time.Now().Add(300 * time.Millisecond).UnixNano())
		res, err := r.RunOnce(t.Context())
		if err != nil || res.Published != 1 {
			t.Errorf("short failure: %+v, %v; want the event recorded published", res, err)
		}
		// A failure longer than the lease: recorded by the relay's next rescue.
		failUntil.Store(time.Now().Add(2 * time.Second).UnixNano())
		if _, err := r.RunOnce(t.Context()); err == nil {
			t.Error("long failure: RunOnce reported no error")
		}
		time.Sleep(time.Until(time.Unix(0, failUntil.Load())) + 1100*time.Millisecond)
		_, err = r.RunOnce(t.Context())
		must(t, err)
		for i := range 2 {
			row := statusOf(t, db, event(i).ID)
			if row.Status != outbox.StatusPublished || row.Attempts != 1 {
				t.Errorf("event %d: status %s, attempts %d, error %v; want published", i, row.Status, row.Attempts, deref(row.LastError))
			}
		}
		if dead.Load() != 0 {
			t.Errorf("OnDead called %d times", dead.Load())
		}
	})
}

// failCompletions makes the relay's completion statements on db fail while
// failing reports true.
func failCompletions(t *testing.T, db *gorm.DB, failing func() bool) {
	t.Helper()
	inject := func(tx *gorm.DB) {
		sql := tx.Statement.SQL.String()
		if failing() && strings.Contains(sql, "(claim_version = ") { // the fence of a completion

			_ = tx.AddError(errors.New("injected: connection reset by peer"))
		}
	}
	must(t, db.Callback().Row().Before("gorm:row").Register("test:fail_completions", inject))
	must(t, db.Callback().Raw().Before("gorm:raw").Register("test:fail_completions", inject))
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}

// A running relay records the outcomes it could not record within their
// lease as soon as the database takes them again.
func TestRunningRelayRecordsLateOutcomes(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		var failing atomic.Bool
		failing.Store(true)
		failCompletions(t, db, failing.Load)
		emitN(t, db, 5, event)
		var delivered atomic.Int64
		pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { delivered.Add(1); return nil })
		time.AfterFunc(2500*time.Millisecond, func() { failing.Store(false) }) // longer than the lease
		runRelays(t, db, 1, pub, 30*time.Second, func() bool { return countStatus(t, db, outbox.StatusPublished) == 5 },
			relay.WithMaxAttempts(1), relay.WithLease(time.Second), relay.WithBatchSize(2))
		if n := delivered.Load(); n != 5 {
			t.Errorf("%d deliveries of 5 events", n)
		}
	})
}
