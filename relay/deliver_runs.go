package relay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox"
)

// delivery is the delivery of one batch: its envelopes, and for each the
// state of its delivery and, once finished, the publisher's error and how
// long it took.
type delivery struct {
	r         *Relay
	ctx       context.Context // ends: start nothing more
	pctx      context.Context // the deliveries' context, ending at the deadline
	batchSpan trace.Span
	envs      []*outbox.Envelope
	runs      [][]int // envs indexes of each run, in order; -1: undecodable
	// state is each envelope's deliveryState. errs and took are written
	// before state becomes finished, and read only after.
	state []atomic.Int32
	errs  []error
	took  []time.Duration
	// maxAttempts is each envelope's most attempts, for MaxAttemptsOf
	// (Publish only).
	maxAttempts []int
}

// The states of an envelope's delivery.
const (
	notStarted int32 = iota
	inFlight
	finished
	withdrawn // not started, and never to be: the batch was given up
)

// withdraw makes every delivery not started yet never start.
func (d *delivery) withdraw() {
	for j := range d.state {
		d.state[j].CompareAndSwap(notStarted, withdrawn)
	}
}

// keyRuns groups a batch into runs: the events of one partition key in id
// order, and each event without a key alone. envOf maps a row to its
// envelope (-1 when it could not be decoded). Runs are ordered by their
// first event's id.
func keyRuns(rows []outbox.OutboxEvent, envOf []int) [][]int {
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(rows[a].ID, rows[b].ID) })
	var runs [][]int
	byKey := map[string]int{}
	for _, i := range order {
		k := rows[i].PartitionKey
		if k == "" {
			runs = append(runs, []int{envOf[i]})
			continue
		}
		if n, ok := byKey[k]; ok {
			runs[n] = append(runs[n], envOf[i])
			continue
		}
		byKey[k] = len(runs)
		runs = append(runs, []int{envOf[i]})
	}
	return runs
}

// concurrently delivers the runs through Publish, WithConcurrency runs at
// once, each run's events one after the other. A run stops at its first
// event that is not published (or could not be decoded); every delivery
// stops when ctx ends or once the publisher said it is unavailable.
func (d *delivery) concurrently() {
	var (
		next    atomic.Int64
		stopped atomic.Bool // unavailable: start nothing more
		wg      sync.WaitGroup
	)
	for range min(d.r.cfg.concurrency, len(d.runs)) {
		wg.Go(func() {
			for {
				n := int(next.Add(1) - 1)
				if n >= len(d.runs) {
					return
				}
				for _, j := range d.runs[n] {
					if j < 0 || d.over() || stopped.Load() {
						break
					}
					err, ok := d.publishOne(j)
					if !ok {
						break // withdrawn
					}
					if outbox.IsUnavailable(err) {
						stopped.Store(true)
					}
					if err != nil {
						break
					}
				}
			}
		})
	}
	wg.Wait()
}

// over reports whether no more deliveries may start: the relay is
// stopping, or the deadline passed (a long run of one key), in which case
// the rest goes back without spending an attempt.
func (d *delivery) over() bool { return d.ctx.Err() != nil || d.pctx.Err() != nil }

// publishOne delivers envelope j through Publish, unless it was
// withdrawn (ok false).
func (d *delivery) publishOne(j int) (err error, ok bool) {
	if !d.begin(j) {
		return nil, false
	}
	dctx, span, e := d.r.trace.deliverySpan(d.pctx, d.batchSpan, d.envs[j])
	dctx = context.WithValue(dctx, maxAttemptsKey{}, d.maxAttempts[j])
	began := time.Now()
	err = d.r.publish(dctx, e)
	d.end(j, span, time.Since(began), err)
	return err, true
}

// begin marks delivery j started, unless it was withdrawn (false).
func (d *delivery) begin(j int) bool { return d.state[j].CompareAndSwap(notStarted, inFlight) }

// end records the result of delivery j: its duration, its span's status,
// and its error.
func (d *delivery) end(j int, span trace.Span, took time.Duration, err error) {
	r := d.r
	r.inst.publishDuration.Record(d.pctx, took.Seconds(), r.inst.typeAttrs(r.table, d.envs[j].Type))
	endDelivery(span, err)
	d.errs[j], d.took[j] = err, took
	d.state[j].Store(finished)
}

// inRounds delivers the runs through PublishBatch, in rounds: the first
// event of every run, then the second event of every run whose first was
// published, and so on. A batch publisher gives no order within one call,
// so two events of a key never share one. Rounds stop when ctx ends, at
// the deadline, or after a round in which the publisher said it is
// unavailable.
func (d *delivery) inRounds() {
	pos := make([]int, len(d.runs)) // next event of each run; -1: stopped
	for !d.over() {
		var round []int // envs indexes
		for n, run := range d.runs {
			if pos[n] < 0 || pos[n] >= len(run) {
				continue
			}
			if run[pos[n]] < 0 { // undecodable: the run stops here
				pos[n] = -1
				continue
			}
			round = append(round, run[pos[n]])
		}
		if len(round) == 0 {
			return
		}
		errs := d.publishRound(round)
		unavailable := false
		for n, run := range d.runs {
			if pos[n] < 0 || pos[n] >= len(run) {
				continue
			}
			if d.errs[run[pos[n]]] != nil {
				pos[n] = -1
				continue
			}
			pos[n]++
		}
		for _, err := range errs {
			unavailable = unavailable || outbox.IsUnavailable(err)
		}
		if unavailable {
			return
		}
	}
}

// publishRound publishes the envelopes round in one PublishBatch call and
// records their results; those withdrawn meanwhile are left out.
func (d *delivery) publishRound(round []int) []error {
	round = slices.DeleteFunc(round, func(j int) bool { return !d.begin(j) })
	if len(round) == 0 {
		return nil
	}
	spans := make([]trace.Span, len(round))
	traced := make([]*outbox.Envelope, len(round))
	for i, j := range round {
		_, spans[i], traced[i] = d.r.trace.deliverySpan(d.pctx, d.batchSpan, d.envs[j])
	}
	began := time.Now()
	res := d.r.publishBatch(d.pctx, traced)
	took := time.Since(began)
	if len(res) != len(round) {
		err := fmt.Errorf("relay: PublishBatch returned %d results for %d events", len(res), len(round))
		res = make([]error, len(round))
		for i := range res {
			res[i] = err
		}
	}
	for i, j := range round {
		d.end(j, spans[i], took, res[i])
	}
	return res
}
