package consumetest

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gormoutbox/outbox/consume"
)

// brokerOutage: the broker unreachable for a while under the relay and a
// consumer: nothing lost, no effect twice, no relay attempt spent (the
// publisher reports the outage as outbox.Unavailable), nothing dead.
func brokerOutage(t *testing.T, h *Harness) {
	if h.Outage == nil {
		t.Skip("the harness has no Outage: the broker cannot be cut here")
	}
	e := newEnv(t, h)
	first := e.emit([]string{"", "k"}, 15, typ)
	e.startRelay()
	var dead atomic.Int64
	e.consumer("c1", e.idempotentEffect("outage", nil),
		consume.WithOnDead(func(context.Context, consume.DeadLetter) { dead.Add(1) }))
	e.waitEffects(first[:10], 60*time.Second)
	restore := h.Outage(t)
	second := e.emit([]string{"", "k"}, 15, typ)
	time.Sleep(2 * time.Second)
	restore()
	ids := append(first, second...)
	// Minutes, not seconds: a broker may hold a message that was in flight
	// during the outage until a timeout of its own (asynq: a task whose
	// completion the cut lost stays active until its lease expires and its
	// recoverer runs, up to two minutes; with key order its key waits).
	e.waitEffects(ids, 3*time.Minute)
	time.Sleep(200 * time.Millisecond)
	e.requireOnce(ids, e.effects())
	var maxAttempts int
	if err := e.db.Raw("SELECT COALESCE(MAX(attempts), 0) FROM outbox_events").Scan(&maxAttempts).Error; err != nil {
		t.Fatal(err)
	}
	if maxAttempts > 1 {
		t.Errorf("an event took %d relay attempts: the outage spent attempts", maxAttempts)
	}
	if dead.Load() != 0 {
		t.Errorf("%d messages dead after the outage", dead.Load())
	}
}
