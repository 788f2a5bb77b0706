package relay

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// leaseMargin is how long before the lease expires deliveries are cut off,
// so that the completion still lands inside the lease.
func (r *Relay) leaseMargin() time.Duration {
	return min(r.cfg.lease/10, 5*time.Second)
}

// runBatch claims one batch, delivers it and records the outcomes. It
// reports whether the publisher said it was unavailable.
func (r *Relay) runBatch(ctx context.Context) (Result, bool, error) {
	c := r.claimBatch(ctx)
	if c.err != nil || len(c.rows) == 0 {
		return Result{}, false, c.err
	}
	b, unavailable := r.deliverBatch(ctx, c, 0)
	res, err := r.complete(b)
	return res, unavailable, err
}

// claimed is the result of one claim.
type claimed struct {
	rows  []outbox.OutboxEvent
	start time.Time  // before the claim: the lease runs from here at the latest
	limit int        // the claim's size: a full claim suggests a backlog
	heads int        // the most partition keys it could take (see runDepth)
	keys  int        // the partition keys it took
	held  *heldBatch // in r.held until completed
	err   error
}

// full reports whether the claim suggests a backlog: it took limit events,
// or as many keys as it could (more may be waiting behind them).
func (c claimed) full() bool {
	return len(c.rows) > 0 && (len(c.rows) == c.limit || c.heads < c.limit && c.keys >= c.heads)
}

// batch is a claimed and delivered batch whose outcomes are not all
// recorded yet.
type batch struct {
	ctx     context.Context // carries the batch span
	span    trace.Span
	start   time.Time
	claimed int       // events claimed
	outs    []outcome // outcomes to record
	pre     Result    // what was recorded while the batch was delivered (see progress)
	held    *heldBatch
}

// heldWait bounds how long a claim that found nothing waits for this
// relay's own batches to be completed before it claims again.
const heldWait = 2 * time.Second

// claimBatch claims up to a batch of events. An error of a claim cut short
// by the end of ctx is not reported: nothing was claimed. A claim that
// finds nothing while this relay holds a batch not completed yet claims
// again once it is (see heldBatches).
func (r *Relay) claimBatch(ctx context.Context) claimed {
	if ctx.Err() != nil {
		return claimed{}
	}
	start := time.Now()
	// A claim that has started runs to its end even if ctx ends meanwhile:
	// cancelled while its rows stream back, it could commit without the
	// relay learning which rows it holds, and they would stay publishing
	// until their lease expired. Claimed rows are released on shutdown.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.lease)
	defer cancel()
	limit := int(r.size.Load())
	heads := r.depth.heads(limit, r.cfg.concurrency)
	db := r.claimDB(cctx)
	rows, err := r.drv.claim(cctx, db, r.cfg.workerID, limit, heads, r.cfg.lease)
	if err == nil && len(rows) == 0 && r.held.wait(ctx, heldWait) {
		rows, err = r.drv.claim(cctx, db, r.cfg.workerID, limit, heads, r.cfg.lease)
	}
	if err != nil {
		r.claimConn.Load().failed()
		return claimed{err: fmt.Errorf("relay: claiming events: %w", err)}
	}
	keys := 0
	var held *heldBatch
	if len(rows) > 0 {
		keys = r.depth.observe(rows, limit)
		held = r.held.add(rows) // until complete
		r.inst.claimed.Add(ctx, int64(len(rows)), metric.WithAttributes(attrTable.String(r.table)))
	}
	if len(rows) == limit {
		r.maybeAnalyze(ctx)
	}
	return claimed{rows: rows, start: start, limit: limit, heads: heads, keys: keys, held: held}
}

// claimDB returns the session a claim runs on: the connection kept for
// claims while Start runs (claimConn), else the pool.
func (r *Relay) claimDB(ctx context.Context) *gorm.DB {
	if db := r.claimConn.Load().get(ctx); db != nil {
		return db.WithContext(ctx)
	}
	return r.db
}

// adapt sets the size of the next claims after c was claimed and its
// delivery took took (see WithBatchSize): twice as large after a full
// claim (claimed.full) delivered quickly, back to the base size after a
// claim that was not full, half as large after a slow delivery. A claim
// whose partition keys number more than half of its events (runs of one
// event: the backlog is spread over many keys) does not grow it: a claim
// takes one head per key, so a larger one would hold every key's head at
// once and leave nothing for the claim made ahead while it is delivered.
func (r *Relay) adapt(c claimed, took time.Duration) {
	base, most := r.cfg.batchSize, r.cfg.maxBatchSize
	if base == most || c.err != nil {
		return
	}
	next := c.limit
	switch {
	case !c.full():
		next = base
	case took > r.cfg.lease/8:
		next = max(base, c.limit/2)
	case c.keys > len(c.rows)/2:
		next = max(base, c.limit/2)
	default:
		next = min(most, 2*c.limit)
	}
	r.size.Store(int64(next))
}

// deliverBatch delivers a claimed batch and reports whether the publisher
// said it was unavailable. Outcomes that become known while the batch is
// still being delivered are recorded meanwhile (progress); the batch
// returned holds the others.
func (r *Relay) deliverBatch(ctx context.Context, c claimed, unavailableDelay time.Duration) (*batch, bool) {
	bctx, span := r.trace.batchSpan(ctx)
	span.SetAttributes(attrClaimed.Int(len(c.rows)))
	if unavailableDelay <= 0 {
		unavailableDelay = time.Second
	}
	b := &batch{ctx: bctx, span: span, start: c.start, claimed: len(c.rows), held: c.held}
	deadline := c.start.Add(r.cfg.lease - r.leaseMargin())
	outs, abandoned, unavailable := r.deliver(bctx, c.rows, deadline, unavailableDelay, func(part []outcome) []bool {
		return r.recordProgress(bctx, part, deadline, &b.pre)
	})
	b.outs = outs
	if len(abandoned) > 0 {
		r.held.abandon(c.held, abandoned)
		b.pre.Abandoned += len(abandoned)
		r.log.Warn("deliveries did not return by the end of their lease (the publisher ignored its context); "+
			"left to the rescue of their expired lease, which counts each an attempt; the rest of the batch is recorded",
			"abandoned", len(abandoned), "claimed", len(c.rows), "lease", r.cfg.lease)
	}
	return b, unavailable
}

// recordProgress records outs, outcomes known while their batch is still
// being delivered, in one try, and adds what it recorded to res. It
// reports which of outs are settled (recorded, or refused by the fence);
// the others are recorded with the rest of the batch.
func (r *Relay) recordProgress(ctx context.Context, outs []outcome, deadline time.Time, res *Result) []bool {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(time.Until(deadline), time.Second))
	defer cancel()
	applied, settled, err := r.apply(actx, outs, fenceMine, false)
	r.account(ctx, outs[:settled], applied[:settled], res)
	if err != nil {
		r.log.Debug("recording outcomes while the batch is delivered failed; they are recorded with the batch", "events", len(outs)-settled, "error", err)
	}
	done := make([]bool, len(outs))
	for i := range settled {
		done[i] = true
	}
	return done
}

// maxSnooze bounds the delay an outbox.Snooze asks for.
const maxSnooze = 24 * time.Hour

// isSnoozed reports whether err asks for a later delivery (outbox.Snooze).
func isSnoozed(err error) bool {
	_, ok := outbox.SnoozeDelay(err)
	return ok
}

// snoozeDelay is the delay an outbox.Snooze error asks for, bounded.
func snoozeDelay(err error) time.Duration {
	d, _ := outbox.SnoozeDelay(err)
	return min(d, maxSnooze)
}

// releaseBatch hands a claimed batch back undelivered, without spending
// attempts, claimable again after delay.
func (r *Relay) releaseBatch(ctx context.Context, c claimed, delay time.Duration) *batch {
	bctx, span := r.trace.batchSpan(ctx)
	outs := make([]outcome, len(c.rows))
	for i := range c.rows {
		outs[i] = outcome{row: &c.rows[i], kind: released, delay: delay}
	}
	return &batch{ctx: bctx, span: span, start: c.start, claimed: len(c.rows), outs: outs, held: c.held}
}

// complete records the outcomes of b (in one statement for an ordinary
// batch), even when the relay's context has ended (the batch in hand is
// finished), and accounts for them: counts, metrics, logs, OnDead. A
// failed statement is retried while the batch's lease lasts; outcomes
// still not recorded then are kept for this relay's next rescue (see
// lateOutcomes), and complete returns the error.
func (r *Relay) complete(b *batch) (res Result, err error) {
	defer r.held.finish(b.held)
	defer func() { endDelivery(b.span, err) }()
	res = b.pre
	res.Claimed = b.claimed
	ctx := context.WithoutCancel(b.ctx)
	applied, settled, err := r.record(ctx, b.outs, b.start.Add(r.cfg.lease))
	r.account(ctx, b.outs[:settled], applied[:settled], &res)
	if err != nil {
		if full := r.late.keep(b.outs[settled:]); full > 0 {
			r.log.Warn("too many outcomes wait to be recorded; these are left to the rescue of their expired lease", "events", full)
		}
		err = fmt.Errorf("relay: recording the outcomes of %d events: %w", len(b.outs)-settled, err)
	}
	r.log.Debug("batch", "claimed", res.Claimed, "published", res.Published, "failed", res.Failed,
		"dead", res.Dead, "released", res.Released, "lost", res.Lost, "abandoned", res.Abandoned, "unrecorded", len(b.outs)-settled,
		"duration", time.Since(b.start))
	return res, err
}

// account counts, logs and reports the outcomes of a completion.
func (r *Relay) account(ctx context.Context, outs []outcome, applied []bool, res *Result) {
	now := time.Now()
	lost := 0
	defer func() {
		if lost > 0 {
			r.log.Warn("another relay took events over (their lease had expired) before their completion; their outcomes were not recorded and they are delivered again",
				"events", lost)
		}
	}()
	for i := range outs {
		o := &outs[i]
		if !applied[i] {
			lost++
			r.lose(ctx, o, res)
			continue
		}
		r.tally(ctx, o, res, now)
		if o.kind == failed {
			r.log.Warn("delivery failed; will retry", "event_id", o.row.EventID, "event_type", o.row.Type,
				"attempt", o.row.Attempts, "retry_in", o.delay, "error", o.err)
		}
	}
}

// lose counts an outcome the fence refused, and logs it at debug level
// (the caller logs one line for all).
func (r *Relay) lose(ctx context.Context, o *outcome, res *Result) {
	res.Lost++
	r.inst.lost.Add(ctx, 1, metric.WithAttributes(attrTable.String(r.table)))
	r.log.Debug("outcome refused by the fence", "event_id", o.row.EventID, "event_type", o.row.Type, "attempt", o.row.Attempts, "outcome", o.kind.String())
}

// tally counts a recorded outcome in res and in the metrics; a dead event
// is logged and given to OnDead. A rescue of an expired claim counts as
// Rescued (and Dead when it had no attempts left), not as Failed.
func (r *Relay) tally(ctx context.Context, o *outcome, res *Result, now time.Time) {
	r.inst.record(ctx, o, r.table, now)
	if o.expired {
		res.Rescued++
	}
	switch o.kind {
	case published:
		res.Published++
	case failed:
		if !o.expired {
			res.Failed++
		}
	case dead:
		res.Dead++
		r.died(ctx, o)
	case released:
		res.Released++
	}
}

// analyzeEvery is how often a busy relay checks whether the table's
// statistics are stale, and refreshes them if they are.
const analyzeEvery = 10 * time.Second

// maybeAnalyze refreshes the table's statistics in the background when
// claims come back full (a backlog) and this relay has not done so for a
// while.
func (r *Relay) maybeAnalyze(ctx context.Context) {
	if r.analyzeError.Load() || time.Since(time.Unix(0, r.lastAnalyze.Load())) < analyzeEvery || !r.analyzing.CompareAndSwap(false, true) {
		return
	}
	r.lastAnalyze.Store(time.Now().UnixNano())
	r.background.Go(func() {
		defer r.analyzing.Store(false)
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := r.drv.analyze(actx, r.db); err != nil && ctx.Err() == nil {
			r.analyzeError.Store(true)
			r.log.Debug("refreshing the table statistics failed; not trying again", "error", err)
		}
	})
}

// died logs a dead letter and calls the OnDead callback.
func (r *Relay) died(ctx context.Context, o *outcome) {
	r.log.Error("event is dead", "event_id", o.row.EventID, "event_type", o.row.Type,
		"attempts", o.row.Attempts, "reason", o.err)
	if r.cfg.onDead == nil {
		return
	}
	env := o.env
	if env == nil { // undecodable: give the callback what is known
		env = &outbox.Envelope{ID: o.row.EventID, Type: o.row.Type, Attempt: o.row.Attempts,
			AggregateType: o.row.AggregateType, AggregateID: o.row.AggregateID, PartitionKey: o.row.PartitionKey}
	}
	defer func() {
		if p := recover(); p != nil {
			r.log.Error("OnDead callback panicked", "event_id", o.row.EventID, "panic", p)
		}
	}()
	r.cfg.onDead(ctx, env, o.err)
}

func (k outcomeKind) String() string {
	switch k {
	case published:
		return "published"
	case failed:
		return "failed"
	case dead:
		return "dead"
	case released:
		return "released"
	}
	return "unknown"
}
