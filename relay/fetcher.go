package relay

import (
	"context"
	"math/rand/v2"
	"time"
)

// fetcher is the relay's main loop, run in Start's goroutine: it
// claims a batch, delivers it and hands it to the completer, again at once
// while batches come back non-empty. While a backlog lasts (full batches,
// with an overlapping completer) it claims the next batch ahead, during
// the delivery of the current one. When the table is idle it waits on the
// listener, from 50ms doubling to the poll interval; database errors and
// an unavailable publisher back it off (backoffStep). Between batches it
// runs the rescuer when it is due (and the janitor, on SQLite).
type fetcher struct {
	r         *Relay
	completer completer
	listener  *listener
	rescuer   *rescuer
	janitor   *janitor
	totals    *counters
	single    *singleActive // nil: always active

	// ahead receives the batch claimed ahead; nil when there is none.
	ahead chan claimed

	idle        time.Duration // the next idle wait
	dbErrors    int           // consecutive failed claims
	unavailable int           // consecutive batches the publisher was unavailable for
}

func newFetcher(r *Relay, c completer, l *listener, j *janitor, totals *counters) *fetcher {
	return &fetcher{r: r, completer: c, listener: l, totals: totals,
		rescuer: newRescuer(r, totals), janitor: j, idle: r.cfg.pollInterval}
}

// run fetches and delivers until ctx ends, then releases the batch claimed
// ahead, if any, without spending attempts.
func (f *fetcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		if !f.single.active() {
			f.releaseAhead(ctx, 0)
			if !f.single.wait(ctx) {
				break
			}
			continue
		}
		f.rescuer.runIfDue(ctx)
		f.janitor.runIfDue(ctx)
		wait, again := f.step(ctx)
		if again {
			continue
		}
		if !f.listener.sleep(ctx, wait) {
			break
		}
	}
	f.releaseAhead(ctx, 0)
}

// step claims (or takes the batch claimed ahead), delivers and hands the
// batch to the completer. It returns how long to wait before the next
// step, or again to go on at once.
func (f *fetcher) step(ctx context.Context) (wait time.Duration, again bool) {
	r := f.r
	c := f.takeAhead(ctx)
	if c.err == nil && len(c.rows) == 0 {
		c = r.claimBatch(ctx)
	}
	if f.completer.overlaps() && f.unavailable == 0 && c.full() {
		f.claimAhead(ctx)
	}
	var unavail bool
	if len(c.rows) > 0 {
		f.totals.claimed.Add(int64(len(c.rows)))
		var b *batch
		began := time.Now()
		b, unavail = r.deliverBatch(ctx, c, backoffStep(f.unavailable+1))
		r.adapt(c, time.Since(began))
		f.completer.complete(b)
		if unavail {
			// The transport is down: do not deliver the batch claimed ahead.
			f.releaseAhead(ctx, backoffStep(f.unavailable+1))
		}
	}
	return f.pace(c, unavail)
}

// pace returns the wait after a step that claimed c, and keeps the counts
// of consecutive failures and the idle wait.
func (f *fetcher) pace(c claimed, unavail bool) (wait time.Duration, again bool) {
	switch {
	case c.err != nil:
		f.dbErrors++
		wait = backoffStep(f.dbErrors)
		f.r.log.Error("claiming failed; backing off", "error", c.err, "retry_in", wait)
	case unavail:
		f.unavailable++
		wait = backoffStep(f.unavailable)
		f.r.log.Warn("publisher unavailable; events released without spending attempts, backing off", "retry_in", wait)
	case len(c.rows) > 0:
		f.dbErrors, f.unavailable = 0, 0
		f.idle = min(50*time.Millisecond, f.r.cfg.pollInterval)
		return 0, true
	default:
		f.dbErrors, f.unavailable = 0, 0
		wait = f.rescuer.idleWait(f.idle)
		f.idle = min(2*f.idle, f.r.cfg.pollInterval)
	}
	return wait, false
}

// claimAhead starts claiming the next batch.
func (f *fetcher) claimAhead(ctx context.Context) {
	f.ahead = make(chan claimed, 1)
	go func(ch chan<- claimed) { ch <- f.r.claimBatch(ctx) }(f.ahead)
}

// takeAhead returns the batch claimed ahead, if any. A batch that waited
// for more than half its lease (a slow delivery before it), or that comes
// when ctx has ended, is released rather than delivered.
func (f *fetcher) takeAhead(ctx context.Context) claimed {
	if f.ahead == nil {
		return claimed{}
	}
	c := <-f.ahead
	f.ahead = nil
	if len(c.rows) > 0 && (ctx.Err() != nil || time.Since(c.start) > f.r.cfg.lease/2) {
		f.release(ctx, c, 0)
		return claimed{}
	}
	return c
}

// releaseAhead releases the batch claimed ahead, if any, claimable again
// after delay.
func (f *fetcher) releaseAhead(ctx context.Context, delay time.Duration) {
	if f.ahead == nil {
		return
	}
	c := <-f.ahead
	f.ahead = nil
	if len(c.rows) > 0 {
		f.release(ctx, c, delay)
	}
}

// release counts the claim c and hands it back undelivered, through the
// completer, claimable again after delay.
func (f *fetcher) release(ctx context.Context, c claimed, delay time.Duration) {
	f.totals.claimed.Add(int64(len(c.rows)))
	f.completer.complete(f.r.releaseBatch(ctx, c, delay))
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
