package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// countingPub is gorm-outbox's no-op publisher: it counts distinct events
// and calls, and records when an event first arrived (seen). Its map is
// sharded by event id, so that concurrent deliveries do not queue on one
// lock (a no-op publisher must not be what limits a relay).
type countingPub struct {
	calls  atomic.Int64
	n      atomic.Int64
	shards [64]pubShard
	first  func(e *outbox.Envelope) // called on an event's first arrival
}

type pubShard struct {
	mu   sync.Mutex
	seen map[string]struct{}
	_    [40]byte // a cache line each
}

func newCountingPub() *countingPub {
	p := &countingPub{}
	for i := range p.shards {
		p.shards[i].seen = map[string]struct{}{}
	}
	return p
}

func (p *countingPub) Publish(_ context.Context, e *outbox.Envelope) error {
	p.calls.Add(1)
	h := uint32(2166136261) // FNV-1a, without allocating
	for i := 0; i < len(e.ID); i++ {
		h = (h ^ uint32(e.ID[i])) * 16777619
	}
	sh := &p.shards[h%uint32(len(p.shards))]
	sh.mu.Lock()
	_, dup := sh.seen[e.ID]
	if !dup {
		sh.seen[e.ID] = struct{}{}
	}
	sh.mu.Unlock()
	if !dup {
		p.n.Add(1)
		if p.first != nil {
			p.first(e)
		}
	}
	return nil
}

func (p *countingPub) distinct() int { return int(p.n.Load()) }

// startRelays runs n relays of db (their defaults) on pub until stop.
func startRelays(ctx context.Context, db *gorm.DB, n int, pub relay.Publisher) (stop func() error, err error) {
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		r, err := relay.New(db, pub, relay.WithLogger(quietLogger()))
		if err != nil {
			cancel()
			return nil, err
		}
		wg.Go(func() { errs <- r.Start(rctx) })
	}
	return func() error {
		cancel()
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				return err
			}
		}
		return nil
	}, nil
}

// drainOurs times d.relays relays until every event was published and
// recorded: in table mode no row is left unpublished; in WAL mode the slot
// confirmed the end of the backlog.
func (e *env) drainOurs(ctx context.Context, db *gorm.DB, d drainSpec, n int) (string, error) {
	var walEnd string
	if d.system == "ours-wal" {
		if err := e.pool.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&walEnd); err != nil {
			return "", err
		}
	}
	pub := newCountingPub()
	stop, err := startRelays(ctx, db, d.relays, pub)
	if err != nil {
		return "", err
	}
	err = waitFor(func() (bool, error) { return pub.distinct() >= n, nil })
	if err == nil && d.system == "ours-table" {
		err = waitFor(func() (bool, error) {
			var left int
			err := e.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status <> 'published'`).Scan(&left)
			return left == 0, err
		})
	}
	if err == nil && d.system == "ours-wal" {
		err = waitFor(func() (bool, error) {
			var done bool
			err := e.pool.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`,
				walEnd, walTable+"_wal").Scan(&done)
			return done, err
		})
	}
	if serr := stop(); err == nil {
		err = serr
	}
	if err == nil && d.system == "ours-wal" {
		// The walsender's CPU counts once it has exited and been reaped.
		err = waitFor(func() (bool, error) {
			var active bool
			err := e.pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, walTable+"_wal").Scan(&active)
			return !active, err
		})
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		return "", fmt.Errorf("%w (published %d distinct of %d)", err, pub.distinct(), n)
	}
	var spilled int
	if d.system == "ours-wal" {
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM `+walTable).Scan(&spilled)
	}
	note := fmt.Sprintf("%d publish calls", pub.calls.Load())
	if spilled > 0 {
		note += fmt.Sprintf(", %d events through the table", spilled)
	}
	return note, nil
}

// riverClient is a River client with a no-op worker that reports each job.
func (e *env) riverClient(started func(*river.Job[OrderCreated])) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{started: started})
	return river.NewClient(riverpgxv5.New(e.pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 100}},
		Workers:       workers,
		FetchCooldown: time.Millisecond,
		Logger:        quietLogger(),
	})
}

type noopWorker struct {
	river.WorkerDefaults[OrderCreated]
	started func(*river.Job[OrderCreated])
}

func (w *noopWorker) Work(_ context.Context, job *river.Job[OrderCreated]) error {
	w.started(job)
	return nil
}
