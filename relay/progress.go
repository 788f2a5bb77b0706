package relay

import (
	"time"

	"github.com/gormoutbox/outbox"
)

// progress follows the delivery of one batch while it runs (deliver).
//
// Outcomes are recorded as they become known, not only once the whole
// batch is delivered: while deliveries run, those that ended are recorded
// every progressEvery (flush; a batch delivered within that time, the
// usual case, is recorded once, by its completion). So one slow or stuck
// delivery does not hold back the outcomes of the others, which a crash
// of the relay would otherwise turn into "lease expired" rescues.
//
// A delivery still running shortly after the batch's deadline (its
// context ended then; a publisher that ignores it, an endless call) is
// given up: the deliveries not started are withdrawn (released without
// spending an attempt), the outcomes known are returned to be recorded,
// and the stuck ones are left publishing. Their lease expires and a
// rescue counts each the attempt it took; the events of their keys wait
// behind them. The relay goes on with its next batch meanwhile.
type progress struct {
	r        *Relay
	d        *delivery
	outs     []outcome // each row's outcome as far as known
	envOf    []int     // row → envelope, -1: undecodable (dead already)
	recorded []bool    // outs[i] recorded by a flush
	// unavailableDelay is how long an event whose publisher said it was
	// unavailable, and the events not started after it, wait.
	unavailableDelay time.Duration
	receipts         *receipts // what publishers reported (SetReceipt), nil without the attempt log
}

// progressEvery is how often the outcomes of a batch still being
// delivered are recorded: a quarter of the lease, at most a second.
func (r *Relay) progressEvery() time.Duration { return min(r.cfg.lease/4, time.Second) }

// await returns when the deliveries are done (done is closed), or, after
// deadline and the lease margin, once the deliveries that did not return
// are given up. Until then it hands the outcomes that became known
// to flush every progressEvery.
func (p *progress) await(done <-chan struct{}, deadline time.Time, flush func([]outcome) []bool) {
	every := p.r.progressEvery()
	tick := time.NewTimer(every)
	defer tick.Stop()
	giveUp := time.NewTimer(time.Until(deadline) + p.r.leaseMargin()/2)
	defer giveUp.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			if flush != nil {
				p.flush(flush)
			}
			tick.Reset(every)
		case <-giveUp.C:
			// The deliveries may have been about to return, only late
			// (the process was frozen past the timer): a last moment.
			select {
			case <-done:
				return
			case <-time.After(p.r.leaseMargin() / 2):
			}
			p.d.withdraw()
			return
		}
	}
}

// flush hands the outcomes that became known and are not recorded yet to
// flush, and notes those it recorded.
func (p *progress) flush(flush func([]outcome) []bool) {
	var (
		part []outcome
		idx  []int
	)
	for i := range p.outs {
		if !p.recorded[i] && p.known(i) {
			part = append(part, p.outs[i])
			idx = append(idx, i)
		}
	}
	if len(part) == 0 {
		return
	}
	for k, ok := range flush(part) {
		if ok {
			p.recorded[idx[k]] = true
		}
	}
}

// known reports whether the outcome of row i is known, and settles it
// from its delivery's result the first time.
func (p *progress) known(i int) bool {
	j := p.envOf[i]
	if j < 0 {
		return true // undecodable: dead
	}
	if p.d.state[j].Load() != finished {
		return false
	}
	if p.outs[i].kind == 0 {
		p.r.settle(&p.outs[i], p.d.errs[j], p.unavailableDelay)
		p.outs[i].took = p.d.took[j]
		if p.outs[i].kind == published {
			p.outs[i].receipt = p.receipts.of(p.d.envs[j])
		}
	}
	return true
}

// rest returns the outcomes not recorded by a flush: every delivered or
// undecodable row's, and released for the rows whose delivery was not
// started (after unavailableDelay when the publisher said it was
// unavailable). abandoned names the rows whose delivery was given up.
func (p *progress) rest() (outs []outcome, abandoned []int64, unavailable bool) {
	for j := range p.d.envs {
		if p.d.state[j].Load() == finished && outbox.IsUnavailable(p.d.errs[j]) {
			unavailable = true
		}
	}
	// The transport is down: what was not started waits out the relay's
	// backoff too, rather than being claimed at once by another relay.
	notStartedDelay := time.Duration(0)
	if unavailable {
		notStartedDelay = p.unavailableDelay
	}
	outs = make([]outcome, 0, len(p.outs))
	for i := range p.outs {
		if p.recorded[i] {
			continue
		}
		j := p.envOf[i]
		switch {
		case j < 0:
		case p.d.state[j].CompareAndSwap(notStarted, withdrawn) || p.d.state[j].Load() == withdrawn:
			p.outs[i].kind, p.outs[i].delay = released, notStartedDelay
		case p.d.state[j].Load() == inFlight:
			abandoned = append(abandoned, p.outs[i].row.ID)
			continue
		default:
			p.known(i)
		}
		outs = append(outs, p.outs[i])
	}
	return outs, abandoned, unavailable
}
