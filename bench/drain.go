package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// drainSpec is one relay drain: fill a backlog (not timed), then time its
// delivery by a number of relays.
type drainSpec struct {
	name   string
	system string // ours-table, ours-wal, raw, river, watermill
	relays int
	batch  int // raw: the claim's size
}

var drains = []drainSpec{
	{"gorm-outbox table mode, 1 relay", "ours-table", 1, 0},
	{"gorm-outbox table mode, 2 relays", "ours-table", 2, 0},
	{"gorm-outbox WAL mode, 1 relay", "ours-wal", 1, 0},
	{"gorm-outbox WAL mode, 2 relays (one streams, one stands by)", "ours-wal", 2, 0},
	{"raw SKIP LOCKED loop (batch 100), 1 relay", "raw", 1, 100},
	{"raw SKIP LOCKED loop (batch 1000), 1 relay", "raw", 1, 1000},
	{"raw SKIP LOCKED loop (batch 1000), 2 relays", "raw", 2, 1000},
	{"River (FetchCooldown 1ms, MaxWorkers 100), 1 client", "river", 1, 0},
	{"River (FetchCooldown 1ms, MaxWorkers 100), 2 clients", "river", 2, 0},
	{"watermill-sql forwarder (batch 100, poll 10ms), 1 forwarder", "watermill", 1, 0},
	{"watermill-sql forwarder (batch 100, poll 10ms), 2 forwarders (one consumer group: they take turns)", "watermill", 2, 0},
}

// drainResult is what one drain measured; over several rounds, the
// median of each figure.
type drainResult struct {
	spec      drainSpec
	events    int
	elapsed   time.Duration
	serverCPU float64 // seconds
	clientCPU float64
	note      string
	rates     []float64 // events/s of each round
}

func (r drainResult) perSec() float64 { return float64(r.events) / r.elapsed.Seconds() }

// drainRounds runs every drain rounds times, each round in another order
// (rotated, every other one reversed), so that the machine's drift hits
// every system alike, and returns each drain's medians.
func (e *env) drainRounds(ctx context.Context, n, rounds int) ([]drainResult, error) {
	all := make([][]drainResult, len(drains))
	for r := range max(rounds, 1) {
		for j := range drains {
			k := (j + r) % len(drains)
			if r%2 == 1 {
				k = len(drains) - 1 - k
			}
			res, err := e.drain(ctx, drains[k], n)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", drains[k].name, err)
			}
			all[k] = append(all[k], res)
			fmt.Fprintf(os.Stderr, "bench: round %d: %s: %.0f events/s\n", r+1, drains[k].name, res.perSec())
		}
	}
	out := make([]drainResult, len(drains))
	for k, rs := range all {
		out[k] = medianDrain(rs)
	}
	return out, nil
}

// medianDrain is the median of each figure of rs (the note of the first).
func medianDrain(rs []drainResult) drainResult {
	m := rs[0]
	var el, srv, cli []float64
	for _, r := range rs {
		el = append(el, r.elapsed.Seconds())
		srv = append(srv, r.serverCPU)
		cli = append(cli, r.clientCPU)
		m.rates = append(m.rates, r.perSec())
	}
	m.elapsed = time.Duration(median(el) * float64(time.Second))
	m.serverCPU, m.clientCPU = median(srv), median(cli)
	return m
}

// drain resets the tables, fills n events for the spec's system, settles
// the database, then times the drain and measures the server's CPU.
func (e *env) drain(ctx context.Context, d drainSpec, n int) (drainResult, error) {
	if err := e.reset(ctx); err != nil {
		return drainResult{}, fmt.Errorf("reset: %w", err)
	}
	run, err := e.fill(ctx, d, n)
	if err != nil {
		return drainResult{}, fmt.Errorf("fill: %w", err)
	}
	if _, err := e.pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return drainResult{}, err
	}
	stopProfile := startProfile()
	cpu0, self0, t0 := e.cpu.seconds(), selfCPU(), time.Now()
	note, err := run(ctx)
	elapsed := time.Since(t0)
	stopProfile()
	if err != nil {
		return drainResult{}, err
	}
	return drainResult{spec: d, events: n, elapsed: elapsed, serverCPU: e.cpu.seconds() - cpu0, clientCPU: selfCPU() - self0, note: note}, nil
}

// reset empties every table and recreates WAL mode's slot, so that each
// drain starts clean.
func (e *env) reset(ctx context.Context) error {
	if _, err := e.pool.Exec(ctx, `TRUNCATE orders, bench_outbox, river_job, river_leader, watermill_forwarder_topic,
		watermill_offsets_forwarder_topic, outbox_events, outbox_events_relays, `+walTable+`, `+walTable+`_relays RESTART IDENTITY`); err != nil {
		return err
	}
	if err := outbox.DropWAL(ctx, e.walDB, outbox.WAL{}); err != nil {
		return err
	}
	if err := outbox.MigrateWAL(e.walDB, outbox.WAL{}); err != nil {
		return err
	}
	_, err := e.pool.Exec(ctx, `VACUUM ANALYZE`)
	return err
}

// fill writes n events of the system and returns the timed drain.
func (e *env) fill(ctx context.Context, d drainSpec, n int) (func(context.Context) (string, error), error) {
	switch d.system {
	case "ours-table", "ours-wal":
		db := e.tableDB
		if d.system == "ours-wal" {
			db = e.walDB
		}
		if err := fillOurs(ctx, db, n); err != nil {
			return nil, err
		}
		return func(ctx context.Context) (string, error) { return e.drainOurs(ctx, db, d, n) }, nil
	case "raw":
		_, err := e.pool.Exec(ctx, `INSERT INTO bench_outbox (event_id, type, payload)
			SELECT gen_random_uuid(), 'order.created', jsonb_build_object('order_id', g, 'customer', 'customer', 'amount', 12.34)
			FROM generate_series(1, $1) g`, n)
		return func(ctx context.Context) (string, error) { return "", e.drainRaw(ctx, d.relays, d.batch, n) }, err
	case "river":
		return e.fillRiver(ctx, d, n)
	case "watermill":
		return e.fillWatermill(ctx, d.relays, n)
	}
	return nil, fmt.Errorf("unknown system %s", d.system)
}

// fillOurs emits n events with outbox.Emit, 100 per transaction.
func fillOurs(ctx context.Context, db *gorm.DB, n int) error {
	for i := 0; i < n; i += 100 {
		evs := make([]outbox.Event, 0, 100)
		for j := i; j < min(i+100, n); j++ {
			evs = append(evs, orderEvent(int64(j+1)))
		}
		if err := db.WithContext(ctx).Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, evs...) }); err != nil {
			return err
		}
	}
	return nil
}

// waitFor polls cond every 2ms until it holds, it fails, or 5 minutes pass.
func waitFor(cond func() (bool, error)) error {
	for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if ok, err := cond(); ok || err != nil {
			return err
		}
	}
	return errors.New("timed out")
}

// fillRiver inserts n jobs (InsertMany, 1000 at a time).
func (e *env) fillRiver(ctx context.Context, d drainSpec, n int) (func(context.Context) (string, error), error) {
	var worked atomic.Int64
	clients := make([]*river.Client[pgx.Tx], d.relays)
	for i := range clients {
		var err error
		if clients[i], err = e.riverClient(func(*river.Job[OrderCreated]) { worked.Add(1) }); err != nil {
			return nil, err
		}
	}
	for i := 0; i < n; i += 1000 {
		params := []river.InsertManyParams{}
		for j := i; j < min(i+1000, n); j++ {
			params = append(params, river.InsertManyParams{Args: OrderCreated{OrderID: int64(j + 1), Customer: "customer", Amount: 12.34}})
		}
		if _, err := clients[0].InsertMany(ctx, params); err != nil {
			return nil, err
		}
	}
	return func(ctx context.Context) (string, error) {
		for _, c := range clients {
			if err := c.Start(ctx); err != nil {
				return "", err
			}
		}
		defer func() {
			for _, c := range clients {
				_ = c.Stop(ctx)
			}
		}()
		err := waitFor(func() (bool, error) { return worked.Load() >= int64(n), nil })
		if err == nil {
			err = waitFor(func() (bool, error) {
				var done int
				err := e.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done)
				return done >= n, err
			})
		}
		return "", err
	}, nil
}
