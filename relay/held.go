package relay

import (
	"context"
	"sync"
	"time"

	"github.com/gormoutbox/outbox"
)

// heldBatches is the batches a relay has claimed and not completed yet.
//
// A claim that finds nothing while this relay still holds a batch may find
// nothing because of it: the keys of that batch stay publishing until its
// outcomes are recorded (on PostgreSQL and MySQL that happens while the
// next batch is claimed). Such a claim waits for the completions and tries
// again (wait), instead of sending the relay to sleep with a keyed backlog
// left in the table.
//
// And this relay's own rescue leaves the rows of its held batches alone
// (holds), even once their lease has expired: their outcomes are on their
// way to the database (a completion delayed past the lease by a stalled
// connection records them, see fenceMine), and a rescue that came first
// would charge them an attempt and have them delivered again. Rows whose
// deliveries the relay gave up on (abandon) are left to the rescue.
type heldBatches struct {
	mu      sync.Mutex
	batches map[*heldBatch]struct{}
	done    chan struct{} // closed when the last batch is completed
}

// heldBatch is one held batch: its rows as claimed, and those given up.
type heldBatch struct {
	rows      []outbox.OutboxEvent
	abandoned map[int64]bool
}

// add records a claimed batch of rows, until finish.
func (h *heldBatches) add(rows []outbox.OutboxEvent) *heldBatch {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.batches) == 0 {
		h.batches = map[*heldBatch]struct{}{}
		h.done = make(chan struct{})
	}
	b := &heldBatch{rows: rows}
	h.batches[b] = struct{}{}
	return b
}

// abandon leaves the rows of b with the ids to the rescue of their
// expired lease.
func (h *heldBatches) abandon(b *heldBatch, ids []int64) {
	if b == nil || len(ids) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if b.abandoned == nil {
		b.abandoned = make(map[int64]bool, len(ids))
	}
	for _, id := range ids {
		b.abandoned[id] = true
	}
}

// finish records that b was completed (a nil or surplus call is ignored).
func (h *heldBatches) finish(b *heldBatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.batches[b]; !ok {
		return
	}
	delete(h.batches, b)
	if len(h.batches) == 0 {
		close(h.done)
	}
}

// holds returns a function that reports whether the row of id claimed at
// claimVersion belongs to a batch held now and was not abandoned (an index
// of the rows held when holds was called).
func (h *heldBatches) holds() func(id, claimVersion int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	held := map[int64]int64{}
	for b := range h.batches {
		for i := range b.rows {
			if row := &b.rows[i]; !b.abandoned[row.ID] {
				held[row.ID] = row.ClaimVersion
			}
		}
	}
	return func(id, claimVersion int64) bool {
		v, ok := held[id]
		return ok && v == claimVersion
	}
}

// wait waits until no batch is held, for at most d or until ctx ends. It
// reports whether a batch was held when it was called.
func (h *heldBatches) wait(ctx context.Context, d time.Duration) bool {
	h.mu.Lock()
	if len(h.batches) == 0 {
		h.mu.Unlock()
		return false
	}
	done := h.done
	h.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	case <-ctx.Done():
	}
	return true
}
