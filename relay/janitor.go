package relay

import (
	"context"
	"time"
)

// retentionEvery is how often the janitor runs, unless a backlog of
// expired rows keeps it going.
const retentionEvery = time.Minute

// cleanupTimeout bounds one cleanup (its batches together), like every
// statement of the relay (see statementTimeout): what it has not deleted
// by then waits for the next.
const cleanupTimeout = 30 * time.Second

// janitor deletes published events older than WithRetention (Relay.cleanup)
// and heartbeats of relays long gone, a second after Start begins and then
// every minute, or again after the next batch while a backlog of expired
// rows lasts. Like the rescuer it runs in the fetcher's goroutine, between
// batches, so that a cleanup never holds the relay long.
type janitor struct {
	r    *Relay
	next time.Time
}

func newJanitor(r *Relay) *janitor { return &janitor{r: r, next: time.Now().Add(time.Second)} }

// runIfDue cleans up if retention is on and a cleanup is due.
func (j *janitor) runIfDue(ctx context.Context) {
	r := j.r
	now := time.Now()
	if r.cfg.retention <= 0 || now.Before(j.next) {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, cleanupTimeout)
	n, err := r.cleanup(cctx)
	cancel()
	if err != nil && ctx.Err() == nil {
		r.log.Error("retention failed", "error", err)
	}
	pctx, cancel := context.WithTimeout(ctx, r.statementTimeout())
	defer cancel()
	if err := r.pruneRelays(pctx); err != nil && ctx.Err() == nil {
		r.log.Debug("pruning old heartbeats failed", "error", err)
	}
	j.next = now.Add(retentionEvery)
	if n >= cleanupBatch*cleanupBatches {
		j.next = now // a backlog of expired rows: go on after the next batch
	}
}
