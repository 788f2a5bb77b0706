package consume

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gormoutbox/outbox"
)

// item is a received message with its decoded envelope.
type item struct {
	m   Message
	env *outbox.Envelope
}

// batch is the state of one batch's handling shared by its workers.
type batch struct {
	stop        atomic.Bool // a handler reported its dependency unavailable: start nothing more
	unavailable atomic.Bool
	tally       tally
}

// handleBatch handles msgs: the messages of one order key one after the
// other, in the order received, other keys at once up to WithConcurrency.
// After a message of a key that did not succeed (retried, waiting), the
// rest of that key is released; after a handler reported its dependency
// unavailable, or once ctx ended, every message not started is. It
// reports whether a handler reported its dependency unavailable.
func (c *Consumer) handleBatch(ctx context.Context, msgs []Message) (unavailable bool) {
	b := &batch{}
	runs := c.runsOf(ctx, msgs, b)
	workers := min(c.cfg.concurrency, len(runs))
	if workers <= 1 {
		for _, r := range runs {
			c.run(ctx, r, b)
		}
	} else {
		work := make(chan []item)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for r := range work {
					c.run(ctx, r, b)
				}
			})
		}
		for _, r := range runs {
			work <- r
		}
		close(work)
		wg.Wait()
	}
	b.tally.log(ctx, c.log, len(msgs))
	return b.unavailable.Load()
}

// Process handles one message with the Consumer's policy, outside Run:
// for a broker that runs the receiving loop itself (an asynq server calls
// a handler per task). It begins the message, runs the handler and
// settles the message through its methods, and reports whether the
// handler reported its dependency unavailable (the caller decides how to
// pause).
func (c *Consumer) Process(ctx context.Context, m Message) (unavailable bool) {
	return c.handleBatch(ctx, []Message{m})
}

// runsOf decodes msgs and groups them by order key, in the order of each
// key's first message; a message without a key is a run of its own. A
// message that does not decode is dead at once.
func (c *Consumer) runsOf(ctx context.Context, msgs []Message, b *batch) [][]item {
	var runs [][]item
	index := map[string]int{}
	for _, m := range msgs {
		env, err := m.Envelope()
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				err = fmt.Errorf("%w: %w", ErrMalformed, err)
			}
			c.dead(ctx, item{m: m}, c.delivery(m), err, b)
			continue
		}
		key := env.PartitionKey
		if k, ok := m.(OrderKeyer); ok {
			key = k.OrderKey()
		}
		it := item{m: m, env: env}
		if key == "" {
			runs = append(runs, []item{it})
			continue
		}
		if i, ok := index[key]; ok {
			runs[i] = append(runs[i], it)
			continue
		}
		index[key] = len(runs)
		runs = append(runs, []item{it})
	}
	return runs
}

// run handles the messages of one key in order, and releases the rest
// after one that did not succeed.
func (c *Consumer) run(ctx context.Context, r []item, b *batch) {
	for i, it := range r {
		if ctx.Err() != nil || b.stop.Load() {
			c.release(ctx, r[i:], b)
			return
		}
		if !c.process(ctx, it, b) {
			c.release(ctx, r[i+1:], b)
			return
		}
	}
}

// release hands messages back unstarted: delivered again later, not
// counted.
func (c *Consumer) release(ctx context.Context, items []item, b *batch) {
	for _, it := range items {
		c.retry(ctx, it, 0, false, b)
		b.tally.add(&b.tally.released, it.env, nil)
	}
}
