package relay

import (
	"context"
	"time"
)

// lateRescueEvery is how often a relay that holds outcomes it could not
// record rescues expired claims: its own are recorded with those outcomes
// as soon as their lease expires, before another relay rescues them.
const lateRescueEvery = 250 * time.Millisecond

// rescuer returns expired leases to the table (Relay.rescue) every half
// lease (1s to 30s), first when Start begins, and every lateRescueEvery
// while this relay holds late outcomes (see lateOutcomes). It runs in the
// fetcher's goroutine, between batches: a rescue never contends with this
// relay's own claims (SQLite has one writer), and expired leases are
// rescued before the first claim.
type rescuer struct {
	r      *Relay
	totals *counters
	every  time.Duration
	next   time.Time // the next periodic rescue
	last   time.Time // the last rescue
}

func newRescuer(r *Relay, totals *counters) *rescuer {
	return &rescuer{r: r, totals: totals, every: min(max(r.cfg.lease/2, time.Second), 30*time.Second)}
}

// due reports whether a rescue is due at now.
func (s *rescuer) due(now time.Time) bool {
	return !now.Before(s.next) || (s.late() && now.Sub(s.last) >= lateRescueEvery)
}

// late reports whether this relay holds outcomes waiting for a rescue.
func (s *rescuer) late() bool { return s.r.late.len() > 0 }

// runIfDue rescues if a rescue is due, and counts what it recorded.
func (s *rescuer) runIfDue(ctx context.Context) {
	now := time.Now()
	if !s.due(now) {
		return
	}
	s.last = now
	res, err := s.r.rescue(ctx)
	s.totals.add(res)
	if err != nil && ctx.Err() == nil {
		s.r.log.Error("rescue failed", "error", err)
	}
	s.next = now.Add(s.every)
}

// idleWait shortens an idle wait while late outcomes wait for a rescue:
// they are recorded as soon as their lease expires.
func (s *rescuer) idleWait(wait time.Duration) time.Duration {
	if s.late() {
		return min(wait, lateRescueEvery)
	}
	return wait
}
