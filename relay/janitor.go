package relay

import (
	"context"
	"sync"
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
// every minute, or again at once while a backlog of expired rows lasts.
// Where the database takes concurrent writers it runs in a goroutine of
// its own, so that a cleanup (milliseconds, a second on a large history)
// never holds a claim back; on SQLite, which has one writer, the fetcher
// runs it between batches instead (runIfDue). A standby relay
// (WithSingleActive) does not clean up.
type janitor struct {
	r      *Relay
	next   time.Time
	active func() bool // nil: always
	cancel context.CancelFunc
	done   chan struct{}
}

func newJanitor(r *Relay, active func() bool) *janitor {
	return &janitor{r: r, next: time.Now().Add(time.Second), active: active}
}

// start runs the janitor in a goroutine of its own where the database
// takes concurrent writers and retention is on; otherwise the fetcher
// calls runIfDue.
func (j *janitor) start(ctx context.Context, wg *sync.WaitGroup) {
	if j.r.cfg.retention <= 0 || !j.r.drv.concurrentWriters() {
		return
	}
	ctx, j.cancel = context.WithCancel(ctx)
	j.done = make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(j.done)
		for {
			t := time.NewTimer(time.Until(j.next))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			j.run(ctx)
		}
	}()
}

// stop ends the janitor's goroutine, if it has one, once the cleanup in
// hand (bounded by cleanupTimeout) has returned.
func (j *janitor) stop() {
	if j.cancel == nil {
		return
	}
	j.cancel()
	<-j.done
}

// runIfDue cleans up if the janitor has no goroutine of its own, retention
// is on and a cleanup is due.
func (j *janitor) runIfDue(ctx context.Context) {
	if j.done != nil || j.r.cfg.retention <= 0 || time.Now().Before(j.next) {
		return
	}
	j.run(ctx)
}

// run cleans up once (unless the relay is a standby) and sets the next
// time.
func (j *janitor) run(ctx context.Context) {
	r := j.r
	now := time.Now()
	j.next = now.Add(retentionEvery)
	if j.active != nil && !j.active() {
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
	if n >= cleanupBatch*cleanupBatches {
		j.next = time.Now() // a backlog of expired rows: go on at once
	}
}
