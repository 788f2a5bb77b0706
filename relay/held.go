package relay

import (
	"context"
	"sync"
	"time"
)

// heldBatches counts the batches a relay has claimed and not completed
// yet. A claim that finds nothing while this relay still holds a batch
// may find nothing because of it: the keys of that batch stay publishing
// until its outcomes are recorded (on PostgreSQL and MySQL that happens
// while the next batch is claimed). Such a claim waits for the
// completions and tries again, instead of sending the relay to sleep with
// a keyed backlog left in the table.
type heldBatches struct {
	mu   sync.Mutex
	n    int
	done chan struct{} // closed when n drops to zero
}

// add records a claimed batch.
func (h *heldBatches) add() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		h.done = make(chan struct{})
	}
	h.n++
}

// finish records that a batch was completed (once per claimed batch; a
// surplus call is ignored).
func (h *heldBatches) finish() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return
	}
	h.n--
	if h.n == 0 {
		close(h.done)
	}
}

// wait waits until no batch is held, for at most d or until ctx ends. It
// reports whether a batch was held when it was called.
func (h *heldBatches) wait(ctx context.Context, d time.Duration) bool {
	h.mu.Lock()
	if h.n == 0 {
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
