package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/gormoutbox/outbox"
)

// walDeliverer delivers the transactions the reader pushes, in batches of
// whole transactions, and settles every event of a batch before the slot
// may confirm past it: delivered, or written to the outbox table (spilled).
type walDeliverer struct {
	s *walStreamer
	// blocked holds the partition keys that have, or may have, unfinished
	// rows in the outbox table: their later events go into the table
	// behind them. Rechecked against the table before an event of the key
	// would be delivered.
	blocked map[string]bool
	seq     int64     // numbers the streamed events in commit order
	outage  time.Time // since when the publisher has been unavailable (zero: it is not)
}

// walEvent is one streamed event of a batch.
type walEvent struct {
	row   outbox.OutboxEvent // as a claimed row would be: Attempts 1, AvailableAt the commit time
	env   *outbox.Envelope   // nil: undecodable, or refused by the registry
	err   error              // why env is nil
	due   time.Time          // the event's own AvailableAt, zero when none
	tx    int                // its transaction's index in the batch
	done  bool               // settled
	spill *spillRow          // how it goes into the table, once decided
}

// run delivers batches until ctx ends.
func (d *walDeliverer) run(ctx context.Context) error {
	for {
		txs := d.gather(ctx)
		if len(txs) == 0 {
			return nil
		}
		if err := d.batch(ctx, txs); err != nil {
			return err
		}
	}
}

// gather waits for a transaction, then takes those already waiting, up to
// the relay's largest batch in events.
func (d *walDeliverer) gather(ctx context.Context) []*walTx {
	var txs []*walTx
	select {
	case <-ctx.Done():
		return nil
	case tx := <-d.s.txs:
		txs = append(txs, tx)
	}
	n := len(txs[0].items)
	for n < d.s.r.cfg.maxBatchSize {
		select {
		case tx := <-d.s.txs:
			txs = append(txs, tx)
			n += len(tx.items)
			continue
		default:
		}
		break
	}
	return txs
}

// batch settles the events of txs, then marks the transactions settled
// up to the last one whose events (and every earlier one's) are.
func (d *walDeliverer) batch(ctx context.Context, txs []*walTx) error {
	events := d.decode(txs)
	if err := d.recheck(ctx, events); err != nil {
		return err
	}
	err := d.settleAll(ctx, events)
	settled := len(txs)
	for i := range events {
		if !events[i].done {
			settled = min(settled, events[i].tx)
		}
	}
	if settled > 0 {
		last := txs[settled-1]
		d.s.settled.Store(uint64(last.end))
		d.s.oldest.settle(last)
	}
	return err
}

// decode numbers the batch's events in commit order; a key announced by
// a row insertion blocks the key's later events (markers are not events).
func (d *walDeliverer) decode(txs []*walTx) []*walEvent {
	var events []*walEvent
	for ti, tx := range txs {
		for _, it := range tx.items {
			if it.ev == nil {
				events = append(events, &walEvent{tx: ti, done: true, row: outbox.OutboxEvent{PartitionKey: it.key, ID: -1}})
				continue
			}
			d.seq++
			it.ev.tx, it.ev.row.ID = ti, d.seq
			events = append(events, it.ev)
		}
	}
	return events
}

// eventOf decodes a message committed at commit into the event a claim
// would have made of its row (attempt 1, available since its commit),
// refused (dead) when it cannot be decoded or fails the registry's check.
func (s *walStreamer) eventOf(m *pglogrepl.LogicalDecodingMessage, commit time.Time) *walEvent {
	ev := &walEvent{row: outbox.OutboxEvent{Attempts: 1, AvailableAt: commit, CreatedAt: commit, Status: outbox.StatusPublishing}}
	msg, err := outbox.DecodeWALMessage(m.Content)
	if err != nil {
		ev.err = outbox.Permanent(fmt.Errorf("undecodable WAL message: %w", err))
		ev.row.EventID, ev.row.Type = fmt.Sprintf("wal-undecodable-%s", m.LSN), "undecodable"
		ev.row.Payload = append([]byte(nil), m.Content...)
		return ev
	}
	e := msg.Envelope
	ev.env, ev.due = e, msg.AvailableAt
	ev.row.EventID, ev.row.Type, ev.row.Version, ev.row.TenantID = e.ID, e.Type, e.Version, e.TenantID
	ev.row.AggregateType, ev.row.AggregateID, ev.row.PartitionKey, ev.row.Topic = e.AggregateType, e.AggregateID, e.PartitionKey, e.Topic
	ev.row.Payload, ev.row.MaxAttempts = e.Payload, msg.MaxAttempts
	if !e.CreatedAt.IsZero() {
		ev.row.CreatedAt = e.CreatedAt
	}
	e.Attempt = 1
	if reg := s.r.cfg.registry; reg != nil {
		if err := reg.Check(e); err != nil {
			ev.env, ev.err = nil, outbox.Permanent(fmt.Errorf("registry check: %w", err))
		}
	}
	return ev
}

// settleAll delivers the events in rounds until each is delivered or
// spilled: a round delivers every event whose key has nothing waiting in
// the table (a key's events one after the other), then spills those that
// failed, died or were snoozed, and the events of their keys that follow.
// An unavailable publisher backs the rounds off, spending no attempt.
func (d *walDeliverer) settleAll(ctx context.Context, events []*walEvent) error {
	for unavailable := 0; ; {
		left := false
		for i := range events {
			left = left || !events[i].done
		}
		if !left || ctx.Err() != nil {
			return nil
		}
		u, err := d.round(ctx, events)
		if err != nil {
			return err
		}
		if !u {
			unavailable, d.outage = 0, time.Time{}
			continue
		}
		if d.outage.IsZero() {
			d.outage = time.Now()
		}
		if since := time.Since(d.outage); since >= d.s.r.cfg.walSpillAfter {
			d.s.r.log.Warn("WAL mode: publisher unavailable; the stream's events move into the table, where the relays retry them",
				"unavailable_for", since.Round(time.Second))
			return d.spillRest(ctx, events)
		}
		unavailable++
		wait := min(backoffStep(unavailable), d.s.r.cfg.walSpillAfter-time.Since(d.outage)+time.Millisecond)
		d.s.r.log.Warn("WAL mode: publisher unavailable; streamed events wait without spending attempts, backing off", "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
}

// spillRest moves every event not settled into the table as pending,
// spending no attempt (the publisher is down: WithWALSpillAfter), their
// keys' later events behind them, so that the slot's confirmed position
// goes on and the server keeps no WAL for the outage.
func (d *walDeliverer) spillRest(ctx context.Context, events []*walEvent) error {
	now := time.Now()
	for _, ev := range events {
		if !ev.done && ev.spill == nil {
			if ev.env == nil {
				ev.spill = d.spillOf(ev, outbox.StatusDead, 1, now, ev.err)
				continue
			}
			ev.spill = d.spillOf(ev, outbox.StatusPending, 0, ev.dueOr(now), nil)
			d.block(ev.row.PartitionKey)
		}
	}
	return d.spillDecided(ctx, events)
}

// round is one delivery of the events not settled, and the spills it
// decides; it reports whether the publisher said it was unavailable.
func (d *walDeliverer) round(ctx context.Context, events []*walEvent) (unavailable bool, err error) {
	now := time.Now()
	var (
		rows    []outbox.OutboxEvent
		idx     []int // rows[k] is events[idx[k]]
		inRound = map[string]bool{}
	)
	for i := range events {
		ev := events[i]
		key := ev.row.PartitionKey
		if ev.done {
			if ev.row.ID == -1 { // a row inserted: its key waits
				d.blocked[key] = true
			}
			continue
		}
		switch {
		case key != "" && inRound[key]:
			// After an event of its key delivered in this round: decided
			// in the next round, once that one's outcome is known.
		case key != "" && d.blocked[key]:
			ev.spill = d.spillOf(ev, outbox.StatusPending, 0, ev.dueOr(now), nil)
		case !ev.due.IsZero() && ev.due.After(now):
			ev.spill = d.spillOf(ev, outbox.StatusPending, 0, ev.due, nil)
			d.block(key)
		case ev.env == nil:
			ev.spill = d.spillOf(ev, outbox.StatusDead, 1, now, ev.err)
		default:
			if key != "" {
				inRound[key] = true
			}
			rows = append(rows, ev.row)
			idx = append(idx, i)
		}
	}
	if len(rows) > 0 {
		unavailable = d.deliver(ctx, events, rows, idx)
	}
	return unavailable, d.spillDecided(ctx, events)
}

// dueOr returns the event's AvailableAt, or now.
func (ev *walEvent) dueOr(now time.Time) time.Time {
	if ev.due.After(now) {
		return ev.due
	}
	return now
}

// block makes key's later events wait in the table.
func (d *walDeliverer) block(key string) {
	if key != "" {
		d.blocked[key] = true
	}
}

// deliver delivers rows (events[idx[k]]) through the relay's delivery,
// and decides each event's fate from its outcome.
func (d *walDeliverer) deliver(ctx context.Context, events []*walEvent, rows []outbox.OutboxEvent, idx []int) bool {
	r := d.s.r
	all := make([]outcome, len(rows))
	envs := make([]*outbox.Envelope, len(rows))
	envOf := make([]int, len(rows))
	for k := range rows {
		all[k].row, all[k].env = &rows[k], events[idx[k]].env
		envs[k], envOf[k] = events[idx[k]].env, k
	}
	deadline := time.Now().Add(r.cfg.lease)
	outs, abandoned, unavailable := r.deliverDecoded(ctx, rows, all, envs, envOf, deadline, 0, nil)
	byID := make(map[int64]int, len(rows))
	for k := range rows {
		byID[rows[k].ID] = idx[k]
	}
	now := time.Now()
	for _, id := range abandoned {
		ev := events[byID[id]]
		ev.spill = d.spillOf(ev, outbox.StatusFailed, 1, now.Add(r.cfg.backoff(1)), errors.New("relay: the delivery did not return by its deadline"))
		d.block(ev.row.PartitionKey)
	}
	for k := range outs {
		o := &outs[k]
		ev := events[byID[o.row.ID]]
		r.inst.record(ctx, o, r.table, now)
		switch {
		case o.kind == published:
			ev.done = true
			d.s.totals.published.Add(1)
		case o.kind == failed:
			ev.spill = d.spillOf(ev, outbox.StatusFailed, 1, now.Add(o.delay), o.err)
			d.block(ev.row.PartitionKey)
		case o.kind == dead:
			ev.spill = d.spillOf(ev, outbox.StatusDead, 1, now, o.err)
		case o.kind == released && o.err != nil && !outbox.IsUnavailable(o.err): // snoozed
			ev.spill = d.spillOf(ev, outbox.StatusPending, 0, now.Add(o.delay), nil)
			d.block(ev.row.PartitionKey)
		}
	}
	return unavailable
}

// spillDecided writes the events given a spill in this round into the
// table, in commit order, and marks them settled once that committed.
func (d *walDeliverer) spillDecided(ctx context.Context, events []*walEvent) error {
	var rows []spillRow
	var idx []int
	for i := range events {
		if events[i].spill != nil && !events[i].done {
			rows = append(rows, *events[i].spill)
			idx = append(idx, i)
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if err := d.s.spill(context.WithoutCancel(ctx), rows); err != nil {
		for _, i := range idx {
			events[i].spill = nil // decided again in the next round
		}
		return fmt.Errorf("moving %d streamed event(s) into %s: %w", len(rows), d.s.r.table, err)
	}
	for _, i := range idx {
		ev := events[i]
		ev.done = true
		d.countSpill(ctx, ev)
	}
	return nil
}

// countSpill counts a spilled event and reports a dead one.
func (d *walDeliverer) countSpill(ctx context.Context, ev *walEvent) {
	r := d.s.r
	switch ev.spill.Status {
	case outbox.StatusFailed:
		d.s.totals.failed.Add(1)
	case outbox.StatusDead:
		d.s.totals.dead.Add(1)
		if ev.env == nil { // dead before delivery: the relay's record counted the others
			r.inst.record(ctx, &outcome{row: &ev.row, kind: dead, err: ev.err}, r.table, time.Now())
		}
		r.log.Error("event is dead", "event_id", ev.row.EventID, "event_type", ev.row.Type, "reason", ev.spill.lastError, "source", "wal")
		if r.cfg.onDead != nil {
			env := ev.env
			if env == nil {
				env = &outbox.Envelope{ID: ev.row.EventID, Type: ev.row.Type, Payload: ev.row.Payload, Attempt: 1}
			}
			r.cfg.onDead(ctx, env, errors.New(ev.spill.lastError))
		}
	}
	d.s.r.inst.walSpilled.Add(ctx, 1, walAttrs(r.table, string(ev.spill.Status)))
}

// spillOf returns how ev goes into the table.
func (d *walDeliverer) spillOf(ev *walEvent, status outbox.Status, attempts int, at time.Time, err error) *spillRow {
	row := &spillRow{OutboxEvent: ev.row}
	row.Status, row.Attempts, row.AvailableAt = status, attempts, at
	if ev.env != nil {
		row.headers = ev.env.Headers
	}
	if err != nil {
		row.lastError = err.Error()
	}
	return row
}
