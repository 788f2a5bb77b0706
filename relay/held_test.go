package relay

import (
	"context"
	"testing"
	"time"
)

func TestHeldBatchesWait(t *testing.T) {
	var h heldBatches
	if h.wait(t.Context(), time.Hour) {
		t.Fatal("wait reported a held batch while none was")
	}
	h.add()
	h.add()
	done := make(chan bool)
	go func() { done <- h.wait(t.Context(), time.Hour) }()
	h.finish()
	select {
	case <-done:
		t.Fatal("wait returned while a batch was still held")
	case <-time.After(50 * time.Millisecond):
	}
	h.finish()
	if !<-done {
		t.Fatal("wait did not report the held batch")
	}
	h.finish() // surplus: ignored
	if h.wait(t.Context(), time.Hour) {
		t.Fatal("a surplus finish left a batch held")
	}
	h.add()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if !h.wait(ctx, time.Hour) {
		t.Fatal("wait did not report the held batch when ctx ended")
	}
	if start := time.Now(); h.wait(t.Context(), 20*time.Millisecond) && time.Since(start) > 10*time.Second {
		t.Fatal("wait overran its bound")
	}
}
