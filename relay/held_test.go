package relay

import (
	"context"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
)

func TestHeldBatchesWait(t *testing.T) {
	var h heldBatches
	if h.wait(t.Context(), time.Hour) {
		t.Fatal("wait reported a held batch while none was")
	}
	a, b := h.add(nil), h.add(nil)
	done := make(chan bool)
	go func() { done <- h.wait(t.Context(), time.Hour) }()
	h.finish(a)
	select {
	case <-done:
		t.Fatal("wait returned while a batch was still held")
	case <-time.After(50 * time.Millisecond):
	}
	h.finish(b)
	if !<-done {
		t.Fatal("wait did not report the held batch")
	}
	h.finish(b) // surplus: ignored
	if h.wait(t.Context(), time.Hour) {
		t.Fatal("a surplus finish left a batch held")
	}
	h.add(nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if !h.wait(ctx, time.Hour) {
		t.Fatal("wait did not report the held batch when ctx ended")
	}
	if start := time.Now(); h.wait(t.Context(), 20*time.Millisecond) && time.Since(start) > 10*time.Second {
		t.Fatal("wait overran its bound")
	}
}

// holds names the rows of held batches at the claim_version they were
// claimed with, except the abandoned ones and those of finished batches.
func TestHeldBatchesHolds(t *testing.T) {
	var h heldBatches
	a := h.add([]outbox.OutboxEvent{{ID: 1, ClaimVersion: 1}, {ID: 2, ClaimVersion: 3}})
	b := h.add([]outbox.OutboxEvent{{ID: 5, ClaimVersion: 1}})
	h.abandon(a, []int64{2})
	h.finish(b)
	holds := h.holds()
	for _, c := range []struct {
		id, version int64
		want        bool
	}{{1, 1, true}, {1, 2, false}, {2, 3, false}, {5, 1, false}, {9, 1, false}} {
		if got := holds(c.id, c.version); got != c.want {
			t.Errorf("holds(%d, %d) = %v, want %v", c.id, c.version, got, c.want)
		}
	}
}
