package consumetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/consume"
)

// keyOrder: a partition key's events are handled one at a time, in commit
// order. With KeyOrderAcrossConsumers, by two consumers, some events
// failing once on the way; otherwise by one consumer handling four
// messages at once, none failing.
func keyOrder(t *testing.T, h *Harness) {
	e := newEnv(t, h)
	keys := []string{"a", "b", "c", "d", "e", "f"}
	ids := e.emit(keys, 15, typ)
	e.startRelay()
	o := &orderProbe{running: map[string]string{}, done: map[string][]int{}, failed: map[string]bool{}}
	fail := h.KeyOrderAcrossConsumers
	hd := o.around(e.idempotentEffect("order", func(_ context.Context, ev *outbox.Envelope) error {
		var p payload
		if err := ev.Unmarshal(&p); err != nil {
			return outbox.Permanent(err)
		}
		return o.effect(ev.ID, p, fail && p.Seq%5 == 2)
	}))
	if h.KeyOrderAcrossConsumers {
		e.consumer("c1", hd, consume.WithConcurrency(2))
		e.consumer("c2", hd, consume.WithConcurrency(2))
	} else {
		e.consumer("c1", hd, consume.WithConcurrency(4))
	}
	e.waitEffects(ids, 90*time.Second)
	e.requireOnce(ids, e.effects())
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, k := range keys {
		if got := fmt.Sprint(o.done[k]); got != fmt.Sprint(seq(15)) {
			t.Errorf("key %s handled in the order %s", k, got)
		}
	}
	for _, v := range o.overlaps {
		t.Error(v)
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

// orderProbe records, per key, the order of the effects and any two runs
// of a key at once.
type orderProbe struct {
	mu       sync.Mutex
	running  map[string]string // key → event id running
	done     map[string][]int  // key → sequence numbers, in the order of their effects
	failed   map[string]bool   // event ids failed once
	overlaps []string
}

// around wraps h (the whole run, idempotency included) to see two runs of
// a key at once.
func (o *orderProbe) around(h consume.Handler) consume.Handler {
	return consume.HandlerFunc(func(ctx context.Context, ev *outbox.Envelope) error {
		k := ev.PartitionKey
		o.mu.Lock()
		if other, ok := o.running[k]; ok {
			o.overlaps = append(o.overlaps, fmt.Sprintf("key %s: %s ran while %s ran", k, ev.ID, other))
		}
		o.running[k] = ev.ID
		o.mu.Unlock()
		time.Sleep(2 * time.Millisecond)
		err := h.Handle(ctx, ev)
		o.mu.Lock()
		delete(o.running, k)
		o.mu.Unlock()
		return err
	})
}

// effect records the effect of id, or fails its first run when failOnce.
func (o *orderProbe) effect(id string, p payload, failOnce bool) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if failOnce && !o.failed[id] {
		o.failed[id] = true
		return errors.New("fails once")
	}
	o.done[p.Key] = append(o.done[p.Key], p.Seq)
	return nil
}
