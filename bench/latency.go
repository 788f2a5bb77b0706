package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/riverqueue/river"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// latencySpec is one commit-to-publish measurement.
type latencySpec struct {
	name   string
	system string
}

var latencies = []latencySpec{
	{"gorm-outbox table mode, 1 relay", "ours-table"},
	{"gorm-outbox WAL mode, 1 relay", "ours-wal"},
	{"River (FetchCooldown 1ms), 1 client", "river"},
	{"raw SKIP LOCKED loop (batch 100, polls every 1ms when idle), 1 relay", "raw"},
	{"watermill-sql forwarder (batch 100, poll 10ms), 1 forwarder", "watermill"},
}

// latencyResult holds the delays from commit to publish.
type latencyResult struct {
	spec latencySpec
	lat  []time.Duration // sorted
}

func (r latencyResult) pct(p float64) time.Duration {
	i := min(max(int(p*float64(len(r.lat)))-1, 0), len(r.lat)-1)
	return r.lat[i]
}

// latency commits n events, one per transaction, spacing apart, with one
// relay (River client, watermill forwarder) running, and measures from the
// moment the COMMIT is sent to the publish (a relay streaming the WAL can
// publish before the writer has read its COMMIT's answer).
func (e *env) latency(ctx context.Context, l latencySpec, n int, spacing time.Duration) (latencyResult, error) {
	if err := e.reset(ctx); err != nil {
		return latencyResult{}, err
	}
	base := time.Now()
	committed, received := make([]atomic.Int64, n), make([]atomic.Int64, n)
	var got atomic.Int64
	mark := func(i int) {
		if i >= 0 && i < n && received[i].CompareAndSwap(0, int64(time.Since(base))) {
			got.Add(1)
		}
	}
	commit, stop, err := e.latencyTarget(ctx, l, mark)
	if err != nil {
		return latencyResult{}, err
	}
	defer stop()
	time.Sleep(time.Second) // let the relay come up
	t0 := time.Now()
	for i := range n {
		time.Sleep(time.Until(t0.Add(time.Duration(i) * spacing)))
		sent, err := commit(ctx, i)
		if err != nil {
			return latencyResult{}, err
		}
		committed[i].Store(int64(sent.Sub(base)))
	}
	for deadline := time.Now().Add(30 * time.Second); got.Load() < int64(n); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			return latencyResult{}, fmt.Errorf("%d of %d events published within 30s", got.Load(), n)
		}
	}
	res := latencyResult{spec: l, lat: make([]time.Duration, n)}
	for i := range n {
		res.lat[i] = time.Duration(received[i].Load() - committed[i].Load())
	}
	slices.Sort(res.lat)
	return res, nil
}

// latencyTarget starts what delivers l's events and returns how to commit
// event i.
func (e *env) latencyTarget(ctx context.Context, l latencySpec, mark func(int)) (commit func(context.Context, int) (time.Time, error), stop func(), err error) {
	switch l.system {
	case "ours-table":
		return e.oursLatency(ctx, e.tableDB, mark)
	case "ours-wal":
		return e.oursLatency(ctx, e.walDB, mark)
	case "river":
		return e.riverLatency(ctx, mark)
	case "raw":
		return e.rawLatency(ctx, mark)
	case "watermill":
		return e.watermillLatency(ctx, mark)
	}
	return nil, nil, errors.New("unknown system " + l.system)
}

// oursLatency starts one relay of db and returns how to Emit event i in
// its own transaction.
func (e *env) oursLatency(ctx context.Context, db *gorm.DB, mark func(int)) (commit func(context.Context, int) (time.Time, error), stop func(), err error) {
	pub := newCountingPub()
	pub.first = func(env *outbox.Envelope) {
		i, _ := strconv.Atoi(env.AggregateID)
		mark(i)
	}
	stopRelays, err := startRelays(ctx, db, 1, pub)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, i int) (time.Time, error) {
		tx := db.WithContext(ctx).Begin()
		if err := outbox.Emit(tx, orderEvent(int64(i))); err != nil {
			tx.Rollback()
			return time.Time{}, err
		}
		sent := time.Now()
		return sent, tx.Commit().Error
	}, func() { _ = stopRelays() }, nil
}

// riverLatency starts one River client and returns how to InsertTx job i
// in its own transaction.
func (e *env) riverLatency(ctx context.Context, mark func(int)) (commit func(context.Context, int) (time.Time, error), stop func(), err error) {
	c, err := e.riverClient(func(j *river.Job[OrderCreated]) { mark(j.Args.Seq) })
	if err != nil {
		return nil, nil, err
	}
	if err := c.Start(ctx); err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, i int) (time.Time, error) {
		tx, err := e.pool.Begin(ctx)
		if err != nil {
			return time.Time{}, err
		}
		if _, err := c.InsertTx(ctx, tx, OrderCreated{OrderID: int64(i), Seq: i}, nil); err != nil {
			_ = tx.Rollback(ctx)
			return time.Time{}, err
		}
		sent := time.Now()
		return sent, tx.Commit(ctx)
	}, func() { _ = c.Stop(ctx) }, nil
}
