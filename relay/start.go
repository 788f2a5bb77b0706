package relay

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
)

// Start runs the relay until ctx ends, then finishes the batch in hand
// (deliveries already started run to completion; the rest are released
// without spending an attempt), records its outcomes and returns nil.
//
// While batches come back non-empty it claims again at once; when the
// table is idle it waits, starting at 50ms and doubling up to the poll
// interval, and on PostgreSQL a NOTIFY from a committing writer cuts the
// wait short. Database errors and an unavailable publisher back it off
// (exponentially, up to 30s) without spending any event's attempts. Along
// the way it rescues expired leases and deletes published events older
// than the retention.
//
// Start returns an error only if the relay is already running, or, in
// WAL mode (outbox.WAL), when the replication slot was invalidated or
// dropped while it streamed (ErrWALSlotLost: events were lost, and the
// relay stops rather than go on silently) or does not exist
// (outbox.ErrWALNotReady).
//
// Inside, Start composes the relay's services, each in its own file: the
// listener (wake-ups on commit), the heartbeater, the completer (recording
// outcomes, overlapped with the next batch where the database takes
// concurrent writers), the janitor (retention, in a goroutine of its own
// where the database takes concurrent writers), and the fetcher, which
// runs in Start's goroutine and runs the rescuer (and on SQLite the
// janitor) between batches. Before the first claim it opens the pool
// connections these services use at once (warmPool), so that the first
// batch's completion does not wait for one to open. With
// WithSingleActive, the single-active service holds the table's lock and
// the fetcher claims only while it is active. They stop in this order: the
// fetcher (ctx), the completer (the batch in hand recorded), the janitor,
// the single-active service (the lock released), then the heartbeater and
// the listener.
func (r *Relay) Start(ctx context.Context) error {
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.release()
	// fatal stops the relay with an error (WAL mode's slot invalidated).
	ctx, fatal := context.WithCancelCause(ctx)
	defer fatal(nil)
	// lctx ends the heartbeater and the listener: with ctx, and at the
	// latest once the batch in hand is recorded.
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	totals := &counters{}
	listen := newListener(r)
	listen.start(lctx)
	defer r.observeTable()()
	single := newSingleActive(r)
	beat := newHeartbeater(r, totals)
	beat.role = single.role
	if single != nil {
		single.changed = beat.poke
	}
	single.start(lctx, &wg)
	beat.start(lctx, &wg)
	r.log.Info("relay started", "table", r.table, "batch_size", r.cfg.batchSize, "concurrency", r.cfg.concurrency,
		"lease", r.cfg.lease, "poll_interval", r.cfg.pollInterval, "listen", listen.on())
	comp := newCompleter(r, totals)
	comp.start(lctx, &wg)

	jan := newJanitor(r, single.active)
	jan.start(lctx, &wg)
	wal := newWALStreamer(r, totals, func(err error) { fatal(&fatalError{err}) })
	if wal != nil {
		if reg, err := r.inst.observeWAL(wal); err == nil {
			defer func() { _ = reg.Unregister() }()
		}
	}
	wal.start(lctx, &wg)
	fetch := newFetcher(r, comp, listen, jan, totals)
	fetch.single = single
	r.runFetcher(ctx, fetch)

	wal.stop()
	comp.stop()
	jan.stop()
	single.stop()
	cancel()
	beat.stop()
	listen.stop()
	wg.Wait()
	r.background.Wait()
	r.logStopped(totals)
	var fe *fatalError
	if errors.As(context.Cause(ctx), &fe) {
		return fe.err
	}
	return nil
}

// observeTable registers the table's gauges (a warning when they cannot
// be) and returns what unregisters them.
func (r *Relay) observeTable() func() {
	reg, err := r.inst.observeTable(r.table, r.stats)
	if err != nil {
		r.log.Warn("the table gauges are not reported", "error", err)
		return func() {}
	}
	return func() { _ = reg.Unregister() }
}

// logStopped logs what the relay did, as it stops.
func (r *Relay) logStopped(t *counters) {
	r.log.Info("relay stopped", "claimed", t.claimed.Load(), "published", t.published.Load(), "failed", t.failed.Load(),
		"dead", t.dead.Load(), "released", t.released.Load(), "lost", t.lost.Load(), "rescued", t.rescued.Load())
}

// fatalError is the cause of a Start stopped by one of its services.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }

// counters are the running totals of a Start: its heartbeats report
// them, and its last log line.
type counters struct {
	claimed, published, failed, dead, released, lost, rescued atomic.Int64
}

// add counts the outcomes of r; claims are counted as they happen.
func (c *counters) add(r Result) {
	c.published.Add(int64(r.Published))
	c.released.Add(int64(r.Released))
	c.failed.Add(int64(r.Failed))
	c.dead.Add(int64(r.Dead))
	c.lost.Add(int64(r.Lost))
	c.rescued.Add(int64(r.Rescued))
}

// runFetcher runs fetch until ctx ends, with the claims on a connection of
// their own meanwhile where the driver keeps one (claimConn).
func (r *Relay) runFetcher(ctx context.Context, fetch *fetcher) {
	r.warmPool(ctx)
	cc := newClaimConn(r)
	r.claimConn.Store(cc)
	defer func() {
		r.claimConn.Store(nil)
		cc.close()
	}()
	fetch.run(ctx)
}
