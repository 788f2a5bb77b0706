package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// rawPoll is how long the hand-written relay sleeps after a claim found
// nothing, when it keeps running (latency); the drain stops there instead.
const rawPoll = time.Millisecond

// rawClaim is the hand-written relay's claim.
const rawClaim = `UPDATE bench_outbox SET status = 'publishing' WHERE id = ANY(ARRAY(
	SELECT id FROM bench_outbox WHERE status = 'pending' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED))
	RETURNING id, payload`

// rawRelay is the hand-written relay: it claims batch rows, publishes each
// (publish; nil: a no-op), marks them published, and claims again at once.
// After a claim that found nothing it returns, unless idle says to go on
// (idle sleeps first). It returns how many rows it published.
func (e *env) rawRelay(ctx context.Context, batch int, publish func(payload []byte), idle func() bool) (int64, error) {
	var done int64
	for {
		rows, err := e.pool.Query(ctx, rawClaim, batch)
		if err != nil {
			return done, err
		}
		var ids []int64
		var id int64
		var payload []byte
		_, err = pgx.ForEachRow(rows, []any{&id, &payload}, func() error {
			ids = append(ids, id)
			if publish != nil {
				publish(payload)
			}
			return nil
		})
		if err != nil {
			return done, err
		}
		if len(ids) == 0 {
			if idle == nil || !idle() {
				return done, nil
			}
			continue
		}
		if _, err := e.pool.Exec(ctx, `UPDATE bench_outbox SET status = 'published' WHERE id = ANY($1)`, ids); err != nil {
			return done, err
		}
		done += int64(len(ids))
	}
}

// drainRaw runs relays hand-written relays (no-op publish) until nothing
// is left.
func (e *env) drainRaw(ctx context.Context, relays, batch, n int) error {
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, relays)
	for range relays {
		wg.Go(func() {
			k, err := e.rawRelay(ctx, batch, nil, nil)
			done.Add(k)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	if done.Load() != int64(n) {
		return fmt.Errorf("published %d of %d", done.Load(), n)
	}
	return nil
}

// rawLatency starts one hand-written relay at batch 100 that polls every
// rawPoll when idle, marking each event as it publishes it, and returns
// how to commit event i (a raw INSERT in its own transaction).
func (e *env) rawLatency(ctx context.Context, mark func(int)) (commit func(context.Context, int) (time.Time, error), stop func(), err error) {
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_, _ = e.rawRelay(rctx, 100, func(payload []byte) {
			var o OrderCreated
			if json.Unmarshal(payload, &o) == nil {
				mark(o.Seq)
			}
		}, func() bool {
			time.Sleep(rawPoll)
			return rctx.Err() == nil
		})
	}()
	commit = func(ctx context.Context, i int) (time.Time, error) {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return time.Time{}, err
		}
		p, _ := json.Marshal(OrderCreated{OrderID: int64(i), Customer: "customer", Amount: 12.34, Seq: i})
		if _, err := tx.Exec(ctx, `INSERT INTO bench_outbox (event_id, type, payload) VALUES (gen_random_uuid(), 'order.created', $1)`, string(p)); err != nil {
			_ = tx.Rollback(ctx)
			return time.Time{}, err
		}
		sent := time.Now()
		return sent, tx.Commit(ctx)
	}
	return commit, func() { cancel(); <-stopped }, nil
}
