package relay

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"

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
	return r.runBatchWith(ctx, 0)
}

func (r *Relay) runBatchWith(ctx context.Context, unavailableDelay time.Duration) (res Result, unavailable bool, err error) {
	if ctx.Err() != nil {
		return res, false, nil
	}
	start := time.Now()
	rows, err := r.drv.claim(ctx, r.db, r.cfg.workerID, r.cfg.batchSize, r.cfg.lease)
	if err != nil {
		if ctx.Err() != nil {
			return res, false, nil
		}
		return res, false, fmt.Errorf("relay: claiming events: %w", err)
	}
	res.Claimed = len(rows)
	if len(rows) == 0 {
		return res, false, nil
	}
	bctx, span := r.trace.batchSpan(ctx)
	defer func() {
		span.SetAttributes(attrClaimed.Int(res.Claimed))
		endDelivery(span, err)
	}()
	r.inst.claimed.Add(ctx, int64(len(rows)), metric.WithAttributes(attrTable.String(r.table)))
	deadline := start.Add(r.cfg.lease - r.leaseMargin())
	if unavailableDelay <= 0 {
		unavailableDelay = time.Second
	}
	outs := r.deliver(bctx, rows, deadline, unavailableDelay)

	// Record the outcomes even when ctx has ended: the batch in hand is
	// finished, and what was not started is released.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(bctx), max(time.Until(start.Add(r.cfg.lease)), 5*time.Second))
	defer cancel()
	applied, err := r.apply(cctx, outs, fenceMine)
	if err != nil {
		return res, false, fmt.Errorf("relay: recording the outcomes of %d events: %w", len(outs), err)
	}
	now := time.Now()
	for i := range outs {
		o := &outs[i]
		if !applied[i] {
			res.Lost++
			r.inst.lost.Add(cctx, 1, metric.WithAttributes(attrTable.String(r.table)))
			r.log.Warn("lease lost before completion; the outcome was not recorded and the event will be delivered again",
				"event_id", o.row.EventID, "event_type", o.row.Type, "attempt", o.row.Attempts, "outcome", o.kind.String())
			continue
		}
		r.inst.record(cctx, o, r.table, now)
		switch o.kind {
		case published:
			res.Published++
		case failed:
			res.Failed++
			r.log.Warn("delivery failed; will retry", "event_id", o.row.EventID, "event_type", o.row.Type,
				"attempt", o.row.Attempts, "retry_in", o.delay, "error", o.err)
		case dead:
			res.Dead++
			r.died(cctx, o)
		case released:
			res.Released++
			if o.err != nil {
				unavailable = true
			}
		}
	}
	r.log.Debug("batch", "claimed", res.Claimed, "published", res.Published, "failed", res.Failed,
		"dead", res.Dead, "released", res.Released, "lost", res.Lost, "duration", time.Since(start))
	return res, unavailable, nil
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
