package relay

import (
	"context"
	"sync"
)

// completer records the outcomes of delivered batches (Relay.complete) and
// adds them to the relay's totals. Where the database takes concurrent
// writers it overlaps: a goroutine of its own records a batch while the
// fetcher claims and delivers the next one. Otherwise (SQLite, a single
// writer) it records inline, before the next claim.
type completer interface {
	// start starts what records the batches, if anything; it records them
	// even after ctx ends, until stop.
	start(ctx context.Context, wg *sync.WaitGroup)
	// complete records b, or hands it over to be recorded.
	complete(b *batch)
	// overlaps reports whether complete returns before b is recorded: the
	// fetcher then claims ahead while a backlog lasts.
	overlaps() bool
	// stop returns once every batch handed over is recorded.
	stop()
}

// newCompleter returns the overlapped completer where the database takes
// concurrent writers, the inline one otherwise.
func newCompleter(r *Relay, totals *counters) completer {
	if r.drv.concurrentWriters() {
		return &overlappedCompleter{r: r, totals: totals}
	}
	return &inlineCompleter{r: r, totals: totals}
}

// completeBatch records b's outcomes and counts them.
func completeBatch(r *Relay, totals *counters, b *batch) {
	res, err := r.complete(b)
	totals.add(res)
	if err != nil {
		r.log.Error("recording a batch's outcomes failed within its lease; this relay records them when it reaches the database again, unless another relay rescues the events first (then they are delivered again)", "error", err)
	}
}

// inlineCompleter records each batch before complete returns.
type inlineCompleter struct {
	r      *Relay
	totals *counters
}

func (c *inlineCompleter) start(context.Context, *sync.WaitGroup) {}
func (c *inlineCompleter) complete(b *batch)                      { completeBatch(c.r, c.totals, b) }
func (c *inlineCompleter) overlaps() bool                         { return false }
func (c *inlineCompleter) stop()                                  {}

// overlappedCompleter records batches in a goroutine of its own. Its
// channel is unbuffered: at most one batch waits for its completion, and
// complete blocks while the one before is still being recorded.
type overlappedCompleter struct {
	r      *Relay
	totals *counters
	ch     chan *batch
	done   chan struct{} // closed once every batch is recorded after stop
}

func (c *overlappedCompleter) start(_ context.Context, wg *sync.WaitGroup) {
	c.ch = make(chan *batch)
	c.done = make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(c.done)
		for b := range c.ch {
			completeBatch(c.r, c.totals, b)
		}
	}()
}

func (c *overlappedCompleter) complete(b *batch) { c.ch <- b }
func (c *overlappedCompleter) overlaps() bool    { return true }

func (c *overlappedCompleter) stop() {
	close(c.ch)
	<-c.done
}
