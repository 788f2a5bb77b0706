package relay_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// sizesPub is a BatchPublisher that records the size of every batch.
type sizesPub struct {
	mu    sync.Mutex
	sizes []int
	n     atomic.Int64
}

func (p *sizesPub) Publish(context.Context, *outbox.Envelope) error { return nil }

func (p *sizesPub) PublishBatch(_ context.Context, es []*outbox.Envelope) []error {
	p.mu.Lock()
	p.sizes = append(p.sizes, len(es))
	p.mu.Unlock()
	p.n.Add(int64(len(es)))
	return make([]error, len(es))
}

func (p *sizesPub) largest() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	most := 0
	for _, s := range p.sizes {
		most = max(most, s)
	}
	return most
}

// By default a claim takes 100 events and grows, while claims come back
// full, up to 1000; WithBatchSize fixes the size.
func TestBatchSizeGrowsWithTheBacklog(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		const n = 4000
		emitN(t, db, n, event)
		pub := &sizesPub{}
		runRelays(t, db, 1, pub, 2*time.Minute, func() bool { return pub.n.Load() >= n })
		if most := pub.largest(); most <= relay.DefaultBatchSize || most > relay.DefaultMaxBatchSize {
			t.Errorf("largest batch %d of a backlog of %d, want it above %d and at most %d (sizes %v)",
				most, n, relay.DefaultBatchSize, relay.DefaultMaxBatchSize, pub.sizes)
		}
		if first := pub.sizes[0]; first != relay.DefaultBatchSize {
			t.Errorf("first batch %d, want %d", first, relay.DefaultBatchSize)
		}

		// A backlog spread over as many keys as events: a claim takes one
		// head per key, and does not grow (it would hold every key at once).
		emitN(t, db, 1500, func(i int) outbox.Event {
			e := event(2*n + i)
			e.PartitionKey = fmt.Sprint("k-", i)
			return e
		})
		spread := &sizesPub{}
		runRelays(t, db, 1, spread, 2*time.Minute, func() bool { return spread.n.Load() >= 1500 })
		if most := spread.largest(); most > relay.DefaultBatchSize {
			t.Errorf("largest batch %d over 1500 keys, want at most %d (sizes %v)", most, relay.DefaultBatchSize, spread.sizes)
		}

		emitN(t, db, 600, func(i int) outbox.Event { return event(n + i) })
		fixed := &sizesPub{}
		runRelays(t, db, 1, fixed, 2*time.Minute, func() bool { return fixed.n.Load() >= 600 }, relay.WithBatchSize(50))
		if most := fixed.largest(); most != 50 {
			t.Errorf("largest batch %d with WithBatchSize(50), want 50 (sizes %v)", most, fixed.sizes)
		}
	})
}

// count returns how many statements that start with prefix contain sub.
func (l *sqlLog) count(prefix, sub string) (with, all int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.stmt {
		if strings.HasPrefix(strings.TrimSpace(s), prefix) {
			all++
			if strings.Contains(s, sub) {
				with++
			}
		}
	}
	return with, all
}

// On PostgreSQL the relay's claims and completions commit lazily (their
// own transactions only), unless WithSynchronousCommit.
func TestRelayCommitsItsBookkeepingLazily(t *testing.T) {
	db := testenv.Open(t, testenv.Postgres)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	for _, sync := range []bool{false, true} {
		emitN(t, db, 50, event)
		log := &sqlLog{Interface: logger.Discard}
		rdb := db.Session(&gorm.Session{Logger: log})
		opts := []relay.Option{}
		if sync {
			opts = append(opts, relay.WithSynchronousCommit())
		}
		pub := newRecorder()
		res, err := newRelay(t, rdb, pub, opts...).RunOnce(t.Context())
		must(t, err)
		if res.Published != 50 {
			t.Fatalf("published %d of 50", res.Published)
		}
		lazyClaims, claims := log.count("WITH RECURSIVE", "synchronous_commit")
		lazyUpdates, updates := log.count("UPDATE", "synchronous_commit")
		want := 1
		if sync {
			want = 0
		}
		if claims == 0 || updates == 0 || lazyClaims != want*claims || lazyUpdates != want*updates {
			t.Errorf("WithSynchronousCommit %v: %d of %d claims and %d of %d completions lazy", sync, lazyClaims, claims, lazyUpdates, updates)
		}
		must(t, db.Exec("DELETE FROM outbox_events").Error)
	}
}
