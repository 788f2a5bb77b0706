package relay

import (
	"context"
	"time"
)

// listener wakes the fetcher when a writer commits events: on PostgreSQL
// the driver LISTENs on the table's channel (see postgresDriver.wakeups);
// elsewhere, or with WithListen(false), it never fires and the fetcher
// polls. The goroutine that listens belongs to the driver; it ends with
// the context given to start and closes the channel.
type listener struct {
	r      *Relay
	wake   <-chan struct{} // nil: no wake-ups
	cancel context.CancelFunc
}

func newListener(r *Relay) *listener { return &listener{r: r} }

// start begins listening, until ctx ends or stop.
func (l *listener) start(ctx context.Context) {
	if !l.r.cfg.listen {
		return
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.wake = l.r.drv.wakeups(ctx, l.r.db, l.r.log)
}

// on reports whether wake-ups can come.
func (l *listener) on() bool { return l.wake != nil }

// stop ends the listening and returns once its goroutine has stopped.
func (l *listener) stop() {
	if l.cancel == nil {
		return
	}
	l.cancel()
	if l.wake == nil {
		return
	}
	for range l.wake { // until the LISTEN goroutine has stopped
	}
}

// sleep waits for d, a wake-up or the end of ctx; it reports whether the
// relay should go on.
func (l *listener) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-l.wake: // a nil channel never fires; a closed one means ctx ended
	}
	return ctx.Err() == nil
}
