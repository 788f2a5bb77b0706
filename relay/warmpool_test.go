package relay_test

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// A relay opens the connections its first batch needs before it claims:
// the first batch's completion, which the next claim waits for, must not
// wait for a connection to open (tens of milliseconds for a PostgreSQL
// backend to start, which every event committed meanwhile waited for).
// The relay's connections go through a proxy that counts them; once the
// relay is idle, delivering and recording an event opens none. The
// pool keeps idle connections as docs/databases.md advises (database/sql's
// default of two closes those a relay hands back beyond them).
func TestStartOpensConnectionsBeforeTheFirstBatch(t *testing.T) {
	for _, dialect := range []string{testenv.Postgres, testenv.MySQL} {
		t.Run(dialect, func(t *testing.T) {
			direct, proxied, p := throughProxy(t, dialect)
			pool, err := proxied.DB()
			must(t, err)
			pool.SetMaxIdleConns(16) // as docs/databases.md advises: at least as many as the relay uses at once
			rec := newRecorder()
			// Heartbeats and retention off: their statements would leave
			// idle connections in the pool by chance.
			r := newRelay(t, proxied, rec, relay.WithHeartbeat(0), relay.WithRetention(0))
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- r.Start(ctx) }()
			defer func() { cancel(); must(t, <-done) }()

			// Idle: no connection opened for half a second.
			opened := p.Accepted()
			for deadline := time.Now().Add(10 * time.Second); ; {
				time.Sleep(500 * time.Millisecond)
				if n := p.Accepted(); n == opened && n > 0 {
					break
				} else if time.Now().After(deadline) {
					t.Fatalf("the relay kept opening connections: %d", n)
				} else {
					opened = n
				}
			}

			must(t, direct.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, event(1)) }))
			for deadline := time.Now().Add(10 * time.Second); statusOf(t, direct, "ev-000001").Status != outbox.StatusPublished; {
				if time.Now().After(deadline) {
					t.Fatal("the event was not published")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := p.Accepted() - opened; n > 0 {
				t.Errorf("the relay opened %d connection(s) to claim, deliver and record its first batch; want them opened at start", n)
			}
		})
	}
}
