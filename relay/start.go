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
			r.log.Error("recording a batch's outcomes failed; its events will be delivered again once their lease expires", "error", err)
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

	var (
		idle           = r.cfg.pollInterval
		dbErrors       int
		unavailable    int
		nextRescue     time.Time
		nextRetention  = time.Now().Add(time.Second)
		rescueEvery    = min(max(r.cfg.lease/2, time.Second), 30*time.Second)
		retentionEvery = time.Minute
	)
	for ctx.Err() == nil {
		if now := time.Now(); !now.Before(nextRescue) {
			if _, err := r.rescue(ctx); err != nil && ctx.Err() == nil {
				r.log.Error("rescue failed", "error", err)
			}
			nextRescue = now.Add(rescueEvery)
		}
		if now := time.Now(); r.cfg.retention > 0 && !now.Before(nextRetention) {
			if _, err := r.cleanup(ctx); err != nil && ctx.Err() == nil {
				r.log.Error("retention failed", "error", err)
			}
			if err := r.pruneRelays(ctx); err != nil && ctx.Err() == nil {
				r.log.Debug("pruning old heartbeats failed", "error", err)
			}
			nextRetention = now.Add(retentionEvery)
		}

		b, unavail, err := r.claimAndDeliver(ctx, backoffStep(unavailable+1))
		if b != nil {
			totals.claimed.Add(int64(len(b.outs)))
			if overlap {
				completions <- b
			} else {
				complete(b)
			}
		}
		var wait time.Duration
		switch {
		case err != nil:
			dbErrors++
			wait = backoffStep(dbErrors)
			r.log.Error("claiming failed; backing off", "error", err, "retry_in", wait)
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
		}
		if !sleep(ctx, wait, wake) {
			break
		}
	}
	close(completions)
	<-completed
	cancel()
	<-beats
	r.log.Info("relay stopped", "claimed", totals.claimed.Load(), "published", totals.published.Load(),
		"failed", totals.failed.Load(), "dead", totals.dead.Load(), "released", totals.released.Load(), "lost", totals.lost.Load())
	return nil
}

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
