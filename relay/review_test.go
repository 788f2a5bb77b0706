package relay_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// wrappedPgx stands for an instrumenting driver wrapper (otelsql,
// sqlhooks): its connections are not *stdlib.Conn, so LISTEN cannot work.
type wrappedPgx struct{ claims *atomic.Int64 }

func (d wrappedPgx) Open(name string) (driver.Conn, error) {
	c, err := stdlib.GetDefaultDriver().Open(name)
	if err != nil {
		return nil, err
	}
	return &wrappedConn{c.(*stdlib.Conn), d.claims}, nil
}

type wrappedConn struct {
	*stdlib.Conn
	claims *atomic.Int64
}

func (c *wrappedConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if strings.Contains(q, "SET status = 'publishing'") {
		c.claims.Add(1)
	}
	return c.Conn.QueryContext(ctx, q, args)
}

var registerWrapped sync.Once

// Without LISTEN the relay polls: it must not spin.
func TestNoListenWithAWrappedDriverPolls(t *testing.T) {
	dsn := testenv.DSN(t, testenv.Postgres)
	claims := &atomic.Int64{}
	registerWrapped.Do(func() { sql.Register("outbox-wrapped-pgx", wrappedPgx{claims}) })
	sqlDB, err := sql.Open("outbox-wrapped-pgx", dsn)
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(postgres.New(postgres.Config{Conn: sqlDB}), testenv.Config())
	must(t, err)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))

	ctx, cancel := context.WithTimeout(t.Context(), 1500*time.Millisecond)
	defer cancel()
	must(t, newRelay(t, db, newRecorder(), relay.WithPollInterval(time.Second)).Start(ctx))
	if n := claims.Load(); n == 0 || n > 6 {
		t.Errorf("%d claims on an empty table in 1.5s with a 1s poll interval", n)
	}
}

// Two relays rescuing the same expired lease: one of them rescues it.
func TestConcurrentRescueIsCountedOnce(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		var dead atomic.Int64
		onDead := relay.WithOnDead(func(context.Context, *outbox.Envelope, error) { dead.Add(1) })
		a := newRelay(t, db, newRecorder(), onDead, relay.WithMaxAttempts(1), relay.WithWorkerID("a"))
		b := newRelay(t, db, newRecorder(), onDead, relay.WithMaxAttempts(1), relay.WithWorkerID("b"))
		const rounds, perRound = 15, 6
		for i := range rounds {
			id := "r" + string(rune('a'+i))
			emitN(t, db, perRound, func(j int) outbox.Event { return outbox.Event{ID: id + string(rune('0'+j)), Type: "t"} })
			must(t, db.Exec(`UPDATE outbox_events SET status = 'publishing', locked_by = 'crashed', locked_until = ?,
				claim_version = 1, attempts = 1 WHERE status = 'pending'`, past(db)).Error)
			var wg sync.WaitGroup
			for _, r := range []*relay.Relay{a, b} {
				wg.Go(func() {
					if _, err := r.RunOnce(context.Background()); err != nil {
						t.Error(err)
					}
				})
			}
			wg.Wait()
			if n := countStatus(t, db, outbox.StatusDead); n != int64((i+1)*perRound) {
				t.Fatalf("round %d: %d dead, want %d", i, n, (i+1)*perRound)
			}
		}
		if n := dead.Load(); n != rounds*perRound {
			t.Errorf("OnDead called %d times for %d dead events", n, rounds*perRound)
		}
	})
}

// A backlog of expired published rows is deleted while the relay runs, not
// at a fixed number of rows per minute.
func TestRetentionKeepsUpWithABacklog(t *testing.T) {
	const n = 25000
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, n, event)
		must(t, db.Exec("UPDATE outbox_events SET status = 'published', published_at = ?", past(db)).Error)
		runRelays(t, db, 1, newRecorder(), 60*time.Second, func() bool {
			var left int64
			db.Model(&outbox.OutboxEvent{}).Count(&left)
			return left == 0
		}, relay.WithRetention(time.Hour))
	})
}

// Stopped at any moment, a relay leaves nothing publishing: deliveries in
// hand finish, claims in flight complete and are released.
func TestStopAtAnyMomentLeavesNothingPublishing(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 3000, event)
		pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { return nil })
		for i := range 25 {
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan error, 1)
			r := newRelay(t, db, pub, relay.WithBatchSize(20), relay.WithWorkerID("stopper"))
			go func() { done <- r.Start(ctx) }()
			time.Sleep(time.Duration(i%7) * 3 * time.Millisecond)
			cancel()
			must(t, <-done)
			if n := countStatus(t, db, outbox.StatusPublishing); n != 0 {
				t.Fatalf("stop %d: %d events left publishing", i, n)
			}
		}
	})
}
