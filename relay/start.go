package relay

import (
	"context"
	"math/rand/v2"
	"time"
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
// Start returns an error only if the relay is already running.
func (r *Relay) Start(ctx context.Context) error {
	if err := r.acquire(); err != nil {
		return err
	}
	defer r.release()
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wake <-chan struct{}
	if r.cfg.listen {
		wake = r.drv.wakeups(lctx, r.db, r.log)
	}
	if reg, err := r.inst.observeTable(r.table, r.stats); err != nil {
		r.log.Warn("the table gauges are not reported", "error", err)
	} else {
		defer func() { _ = reg.Unregister() }()
	}
	totals := &counters{}
	beats := make(chan struct{})
	if r.cfg.heartbeat > 0 {
		go func() { defer close(beats); r.heartbeat(lctx, time.Now(), totals) }()
	} else {
		close(beats)
	}
	r.log.Info("relay started", "table", r.table, "batch_size", r.cfg.batchSize, "concurrency", r.cfg.concurrency,
		"lease", r.cfg.lease, "poll_interval", r.cfg.pollInterval, "listen", wake != nil)

	// Where the database takes concurrent writers, outcomes are recorded by
	// a second goroutine, so that the next claim and delivery overlap the
	// completion of the previous batch. The channel is unbuffered: at most
	// one batch waits for its completion.
	complete := func(b *batch) {
		res, err := r.complete(b)
		totals.add(res)
		if err != nil {
			r.log.Error("recording a batch's outcomes failed within its lease; this relay records them when it reaches the database again, unless another relay rescues the events first (then they are delivered again)", "error", err)
		}
	}
	overlap := r.drv.concurrentWriters()
	completions := make(chan *batch)
	completed := make(chan struct{})
	go func() {
		defer close(completed)
		for b := range completions {
			complete(b)
		}
	}()
	record := func(b *batch) {
		if overlap {
			completions <- b
		} else {
			complete(b)
		}
	}

	// The batch claimed ahead, if any. A batch that waited for more than
	// half its lease (a slow delivery before it) is released rather than
	// delivered with little of its lease left.
	var ahead chan claimed
	claimAhead := func() {
		ahead = make(chan claimed, 1)
		go func(ch chan<- claimed) { ch <- r.claimBatch(ctx) }(ahead)
	}
	takeAhead := func() claimed {
		if ahead == nil {
			return claimed{}
		}
		c := <-ahead
		ahead = nil
		if len(c.rows) > 0 && (ctx.Err() != nil || time.Since(c.start) > r.cfg.lease/2) {
			totals.claimed.Add(int64(len(c.rows)))
			record(r.releaseBatch(ctx, c, 0))
			return claimed{}
		}
		return c
	}
	releaseAhead := func(delay time.Duration) {
		if ahead == nil {
			return
		}
		c := <-ahead
		ahead = nil
		if len(c.rows) > 0 {
			totals.claimed.Add(int64(len(c.rows)))
			record(r.releaseBatch(ctx, c, delay))
		}
	}

	var (
		idle           = r.cfg.pollInterval
		dbErrors       int
		unavailable    int
		nextRescue     time.Time
		lastRescue     time.Time
		nextRetention  = time.Now().Add(time.Second)
		rescueEvery    = min(max(r.cfg.lease/2, time.Second), 30*time.Second)
		retentionEvery = time.Minute
	)
	for ctx.Err() == nil {
		if now := time.Now(); !now.Before(nextRescue) || (r.late.len() > 0 && now.Sub(lastRescue) >= lateRescueEvery) {
			lastRescue = now
			res, err := r.rescue(ctx)
			totals.add(res)
			if err != nil && ctx.Err() == nil {
				r.log.Error("rescue failed", "error", err)
			}
			nextRescue = now.Add(rescueEvery)
		}
		if now := time.Now(); r.cfg.retention > 0 && !now.Before(nextRetention) {
			n, err := r.cleanup(ctx)
			if err != nil && ctx.Err() == nil {
				r.log.Error("retention failed", "error", err)
			}
			if err := r.pruneRelays(ctx); err != nil && ctx.Err() == nil {
				r.log.Debug("pruning old heartbeats failed", "error", err)
			}
			nextRetention = now.Add(retentionEvery)
			if n >= cleanupBatch*cleanupBatches {
				nextRetention = now // a backlog of expired rows: go on after the next batch
			}
		}

		// While a backlog lasts, the next batch is claimed while this one
		// is delivered (where the database takes concurrent writers).
		c := takeAhead()
		if c.err == nil && len(c.rows) == 0 {
			c = r.claimBatch(ctx)
		}
		if overlap && unavailable == 0 && len(c.rows) == r.cfg.batchSize {
			claimAhead()
		}
		var (
			b       *batch
			unavail bool
		)
		if len(c.rows) > 0 {
			totals.claimed.Add(int64(len(c.rows)))
			b, unavail = r.deliverBatch(ctx, c, backoffStep(unavailable+1))
			record(b)
			if unavail {
				// The transport is down: do not deliver the batch claimed ahead.
				releaseAhead(backoffStep(unavailable + 1))
			}
		}
		var wait time.Duration
		switch {
		case c.err != nil:
			dbErrors++
			wait = backoffStep(dbErrors)
			r.log.Error("claiming failed; backing off", "error", c.err, "retry_in", wait)
		case unavail:
			unavailable++
			wait = backoffStep(unavailable)
			r.log.Warn("publisher unavailable; events released without spending attempts, backing off", "retry_in", wait)
		case b != nil:
			dbErrors, unavailable = 0, 0
			idle = min(50*time.Millisecond, r.cfg.pollInterval)
			continue
		default:
			dbErrors, unavailable = 0, 0
			wait = idle
			idle = min(2*idle, r.cfg.pollInterval)
			if r.late.len() > 0 {
				wait = min(wait, lateRescueEvery) // record them as soon as their lease expires
			}
		}
		if !sleep(ctx, wait, wake) {
			break
		}
	}
	releaseAhead(0)
	close(completions)
	<-completed
	cancel()
	<-beats
	if wake != nil {
		for range wake { // until the LISTEN goroutine has stopped
		}
	}
	r.background.Wait()
	r.log.Info("relay stopped", "claimed", totals.claimed.Load(), "published", totals.published.Load(),
		"failed", totals.failed.Load(), "dead", totals.dead.Load(), "released", totals.released.Load(), "lost", totals.lost.Load())
	return nil
}

// lateRescueEvery is how often a relay that holds outcomes it could not
// record rescues expired claims: its own are recorded with those outcomes
// as soon as their lease expires, before another relay rescues them.
const lateRescueEvery = 250 * time.Millisecond

// sleep waits for d, a wake-up or the end of ctx; it reports whether the
// relay should go on.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake: // a nil channel never fires; a closed one means ctx ended
	}
	return ctx.Err() == nil
}

// backoffStep is the relay's own backoff after n consecutive failures:
// 1s doubling to 30s, with jitter.
func backoffStep(n int) time.Duration {
	d := 30 * time.Second
	if n < 6 {
		d = time.Second << max(n-1, 0)
	}
	return d/2 + rand.N(d/2+1)
}
