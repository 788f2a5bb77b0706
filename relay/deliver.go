package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox"
)

// outcomeKind is what happens to a claimed event.
type outcomeKind int

const (
	published outcomeKind = iota + 1
	failed                // another attempt after delay
	dead                  // no more attempts
	released              // back to the table without spending an attempt
)

// outcome is the fate of one claimed event.
type outcome struct {
	row   *outbox.OutboxEvent
	env   *outbox.Envelope // nil when the row could not be decoded
	kind  outcomeKind
	err   error         // why it failed, died or was released (nil for a shutdown release)
	delay time.Duration // until the next claim, for failed and released
	took  time.Duration // how long the delivery ran (0: none ran)
	// receipt is where the publisher delivered a published event
	// (SetReceipt), "" for none.
	receipt string
	// expired: a rescue gave the outcome, the claim's lease having
	// expired without one.
	expired bool
}

// envelope builds what the publisher receives from a claimed row.
func envelope(row *outbox.OutboxEvent) (*outbox.Envelope, error) {
	e := &outbox.Envelope{
		ID:            row.EventID,
		Type:          row.Type,
		AggregateType: row.AggregateType,
		AggregateID:   row.AggregateID,
		PartitionKey:  row.PartitionKey,
		TenantID:      row.TenantID,
		Topic:         row.Topic,
		Version:       row.Version,
		Attempt:       row.Attempts,
		Payload:       row.Payload,
		CreatedAt:     row.CreatedAt,
	}
	if len(row.Headers) > 0 {
		if err := json.Unmarshal(row.Headers, &e.Headers); err != nil {
			return nil, fmt.Errorf("headers are not a JSON object of strings: %w", err)
		}
	}
	return e, nil
}

func (r *Relay) maxAttempts(row *outbox.OutboxEvent) int {
	if row.MaxAttempts > 0 {
		return row.MaxAttempts
	}
	return r.cfg.maxAttempts
}

// deliver publishes the claimed rows and returns the outcomes not recorded
// yet. The events of one partition key are delivered one after the other,
// in id order; after one that was not published, the later ones of its key
// are not started. Deliveries not started (for that reason, when ctx ends,
// or after the publisher reported itself unavailable) are released without
// spending an attempt. Started deliveries run to completion under a
// context that ends at deadline, not with ctx.
//
// While the deliveries run, flush (when not nil) is given the outcomes
// known so far every progressEvery, and reports which it recorded; they
// are not returned (see progress). Deliveries still running shortly after
// deadline (a publisher that ignores its context) are given up: deliver
// returns without them, and abandoned names their rows, left publishing
// for the rescue of their expired lease. unavailable reports whether the
// publisher said it was unavailable.
func (r *Relay) deliver(ctx context.Context, rows []outbox.OutboxEvent, deadline time.Time, unavailableDelay time.Duration,
	flush func([]outcome) []bool) (outs []outcome, abandoned []int64, unavailable bool) {
	all, envs, envOf := r.decodeRows(rows)
	return r.deliverDecoded(ctx, rows, all, envs, envOf, deadline, unavailableDelay, flush)
}

// deliverDecoded is deliver of rows already decoded: all holds each row's
// outcome (dead for the undecodable ones), envs the envelopes to deliver
// and envOf each row's envelope (-1: none).
func (r *Relay) deliverDecoded(ctx context.Context, rows []outbox.OutboxEvent, all []outcome, envs []*outbox.Envelope, envOf []int,
	deadline time.Time, unavailableDelay time.Duration, flush func([]outcome) []bool) (outs []outcome, abandoned []int64, unavailable bool) {
	if len(envs) == 0 {
		return all, nil, false
	}
	pctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	defer cancel()
	pctx, rc := r.withReceipts(pctx)
	d := &delivery{r: r, ctx: ctx, pctx: pctx, batchSpan: trace.SpanFromContext(ctx), envs: envs,
		errs: make([]error, len(envs)), took: make([]time.Duration, len(envs)), state: make([]atomic.Int32, len(envs))}
	d.runs = keyRuns(rows, envOf)
	if r.batchPub == nil {
		d.maxAttempts = make([]int, len(envs))
		for i, j := range envOf {
			if j >= 0 {
				d.maxAttempts[j] = r.maxAttempts(&rows[i])
			}
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if r.batchPub != nil {
			d.inRounds()
		} else {
			d.concurrently()
		}
	}()
	p := &progress{r: r, d: d, outs: all, envOf: envOf, recorded: make([]bool, len(all)), unavailableDelay: unavailableDelay, receipts: rc}
	p.await(done, deadline, flush)
	return p.rest()
}

// decodeRows builds the envelopes of rows, and their outcomes: dead for a
// row that cannot be decoded or fails the registry's check. envOf maps a
// row to its envelope, -1 for none.
func (r *Relay) decodeRows(rows []outbox.OutboxEvent) (outs []outcome, envs []*outbox.Envelope, envOf []int) {
	outs = make([]outcome, len(rows))
	envOf = make([]int, len(rows))
	for i := range rows {
		outs[i].row = &rows[i]
		envOf[i] = -1
		env, err := envelope(&rows[i])
		if err != nil {
			outs[i].kind, outs[i].err = dead, outbox.Permanent(err)
			continue
		}
		outs[i].env = env
		if reg := r.cfg.registry; reg != nil {
			if err := reg.Check(env); err != nil {
				outs[i].kind, outs[i].err = dead, outbox.Permanent(fmt.Errorf("registry check: %w", err))
				continue
			}
		}
		envOf[i] = len(envs)
		envs = append(envs, env)
	}
	return outs, envs, envOf
}

// settle sets the outcome of a started delivery that returned err.
func (r *Relay) settle(o *outcome, err error, unavailableDelay time.Duration) {
	switch {
	case err == nil:
		o.kind = published
	case outbox.IsUnavailable(err):
		o.kind, o.err, o.delay = released, err, unavailableDelay
	case isSnoozed(err):
		o.kind, o.err, o.delay = released, err, snoozeDelay(err)
	case outbox.IsPermanent(err):
		o.kind, o.err = dead, err
	default:
		r.retryOrDie(o, err)
	}
}

// retryOrDie makes o failed, to be retried after the backoff, or dead when
// its row has no attempts left.
func (r *Relay) retryOrDie(o *outcome, err error) {
	if o.row.Attempts >= r.maxAttempts(o.row) {
		o.kind, o.err = dead, fmt.Errorf("no attempts left (%d of %d): %w", o.row.Attempts, r.maxAttempts(o.row), err)
		return
	}
	o.kind, o.err, o.delay = failed, err, r.cfg.backoff(o.row.Attempts)
}

// errPanic is wrapped by the error of a publisher that panicked.
var errPanic = errors.New("publisher panicked")

func (r *Relay) publish(ctx context.Context, e *outbox.Envelope) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanic, p)
			r.log.Error("publisher panicked", "event_id", e.ID, "event_type", e.Type, "panic", p, "stack", string(debug.Stack()))
		}
	}()
	return r.pub.Publish(ctx, e)
}

func (r *Relay) publishBatch(ctx context.Context, es []*outbox.Envelope) (errs []error) {
	defer func() {
		if p := recover(); p != nil {
			err := fmt.Errorf("%w: %v", errPanic, p)
			r.log.Error("batch publisher panicked", "events", len(es), "panic", p, "stack", string(debug.Stack()))
			errs = make([]error, len(es))
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	return r.batchPub.PublishBatch(ctx, es)
}
