package relay

import (
	"context"
	"sync"
	"time"
)

// Recording outcomes when the database fails.
//
// A batch's completion that fails (a connection cut, a failover) is
// retried with a backoff until the batch's lease ends. Outcomes still not
// recorded then are kept in memory as late outcomes: once their lease has
// expired, this relay's own rescue finds the rows still publishing under
// the claim it made (same locked_by and claim_version, which every claim
// and rescue bumps) and records the outcome it knows, published for a
// delivered event, instead of "lease expired". Another relay's rescue
// comes first only if it runs before this relay reaches the database
// again; it bumps claim_version, and the late outcome is then refused by
// the fence and dropped, as a lost lease: the event is delivered again.

// Bounds of the retries of a failed completion.
const (
	recordFirstPause = 50 * time.Millisecond
	recordMaxPause   = time.Second
	// minStatementTimeout is the least time a completion statement gets,
	// even when the lease has (nearly) ended.
	minStatementTimeout = 5 * time.Second
	// maxLate bounds the late outcomes a relay keeps.
	maxLate = 100000
)

// statementTimeout bounds the relay's own statements that no lease bounds
// (rescues, heartbeats, retention): the lease, and minStatementTimeout at
// least. Every statement needs a deadline: a connection whose peer
// vanished without a FIN or RST (a network partition that drops packets,
// a firewall or NAT that forgot the connection, a failover to another
// machine) never answers, and a statement sent on it without one waits
// for ever, and the relay's loop with it.
func (r *Relay) statementTimeout() time.Duration { return max(r.cfg.lease, minStatementTimeout) }

// record records outs with fenceMine, retrying a failed statement after a
// backoff while the lease lasts (until deadline). It returns which outcomes
// were applied and, with the error of the last try, the number settled
// (recorded or refused): outs[settled:] are not recorded.
func (r *Relay) record(ctx context.Context, outs []outcome, deadline time.Time) (applied []bool, settled int, err error) {
	applied = make([]bool, len(outs))
	pause := recordFirstPause
	for try := 0; ; try++ {
		actx, cancel := context.WithTimeout(ctx, max(time.Until(deadline), minStatementTimeout))
		got, n, err := r.apply(actx, outs[settled:], fenceMine, try > 0)
		cancel()
		copy(applied[settled:settled+n], got[:n])
		settled += n
		if err == nil || time.Now().Add(pause).After(deadline) {
			return applied, settled, err
		}
		if try == 0 {
			r.log.Warn("recording outcomes failed; retrying within the lease", "events", len(outs)-settled,
				"retry_in", pause, "error", err)
		}
		time.Sleep(pause)
		pause = min(2*pause, recordMaxPause)
	}
}

// lateOutcomes are outcomes this relay knows but could not record within
// their lease, by row id.
type lateOutcomes struct {
	mu   sync.Mutex
	outs map[int64]lateOutcome
}

type lateOutcome struct {
	o  outcome
	at time.Time // when it was kept
}

// keep remembers outs, and returns how many it could not keep (over
// maxLate). Payloads are dropped, except for dead events, whose envelope
// goes to OnDead.
func (l *lateOutcomes) keep(outs []outcome) (full int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.outs == nil {
		l.outs = make(map[int64]lateOutcome, len(outs))
	}
	now := time.Now()
	for i, o := range outs {
		if len(l.outs) >= maxLate {
			return len(outs) - i
		}
		row := *o.row
		row.Payload = nil
		o.row = &row
		if o.kind != dead {
			o.env = nil
		}
		l.outs[row.ID] = lateOutcome{o: o, at: now}
	}
	return 0
}

// known returns the late outcome of the claim of row id at claimVersion.
func (l *lateOutcomes) known(id, claimVersion int64) (outcome, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	lo, ok := l.outs[id]
	if !ok || lo.o.row.ClaimVersion != claimVersion {
		return outcome{}, false
	}
	return lo.o, true
}

// forget drops the late outcomes of ids, and returns and drops those kept
// longer than ttl.
func (l *lateOutcomes) forget(ids []int64, ttl time.Duration) []outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range ids {
		delete(l.outs, id)
	}
	var old []outcome
	for id, lo := range l.outs {
		if time.Since(lo.at) > ttl {
			old = append(old, lo.o)
			delete(l.outs, id)
		}
	}
	return old
}

// len returns how many late outcomes are kept.
func (l *lateOutcomes) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.outs)
}
