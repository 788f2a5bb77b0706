package outboxredis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
)

// overlaps is a handler that runs for a while and notes every event
// handled while another run of it (or, by key, of its key) was in
// progress, and each event's runs.
type overlaps struct {
	hold time.Duration

	mu         sync.Mutex
	running    map[string]int // event id → runs in progress
	keyRunning map[string]string
	runs       map[string]int
	twice      map[string]int // event id → runs started while another ran
	keyOverlap []string
}

func newOverlaps(hold time.Duration) *overlaps {
	return &overlaps{hold: hold, running: map[string]int{}, keyRunning: map[string]string{}, runs: map[string]int{}, twice: map[string]int{}}
}

func (o *overlaps) Handle(_ context.Context, e *outbox.Envelope) error {
	o.mu.Lock()
	if o.running[e.ID] > 0 {
		o.twice[e.ID]++
	}
	o.running[e.ID]++
	o.runs[e.ID]++
	if e.PartitionKey != "" {
		if other, ok := o.keyRunning[e.PartitionKey]; ok {
			o.keyOverlap = append(o.keyOverlap, fmt.Sprintf("%s started while %s of its key ran", e.ID, other))
		}
		o.keyRunning[e.PartitionKey] = e.ID
	}
	o.mu.Unlock()
	time.Sleep(o.hold)
	o.mu.Lock()
	o.running[e.ID]--
	if o.keyRunning[e.PartitionKey] == e.ID {
		delete(o.keyRunning, e.PartitionKey)
	}
	o.mu.Unlock()
	return nil
}

func (o *overlaps) handled() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.runs)
}

// check fails t for events handled twice at once or more than once, and
// for two events of one key handled at once.
func (o *overlaps) check(t *testing.T, n int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.twice) > 0 {
		t.Errorf("%d of %d entries were handled by two consumers at once: %v", len(o.twice), n, o.twice)
	}
	for _, v := range o.keyOverlap[:min(len(o.keyOverlap), 10)] {
		t.Errorf("key order: %s", v)
	}
	again := map[string]int{}
	for id, k := range o.runs {
		if k != 1 {
			again[id] = k
		}
	}
	if len(again) > 0 || len(o.runs) != n {
		t.Errorf("%d entries handled, want %d, each once; handled more than once: %v", len(o.runs), n, again)
	}
}

// No entry of a read batch is handled by two consumers at once, for any
// count and handler time within the documented bounds: two consumers of a
// group, a min idle time of 2s, and batches whose last entry waits far
// longer than that behind the others (or a handler run, within its
// timeout, longer than the min idle time). An entry this consumer holds is
// kept from being adopted (XAUTOCLAIM) by the other, and each is handled
// once. With WithKeyChain and WithKeyOrder, two events of one key never
// run at once across the consumers.
func TestConsumersNeverHandleAnEntryTwiceAtOnce(t *testing.T) {
	for _, c := range []struct {
		count, entries int
		hold, timeout  time.Duration
		keyed          bool
	}{
		{count: 10, entries: 10, hold: 600 * time.Millisecond},
		{count: 40, entries: 40, hold: 150 * time.Millisecond},
		{count: 2, entries: 2, hold: 2500 * time.Millisecond, timeout: 5 * time.Second},
		{count: 10, entries: 10, hold: 600 * time.Millisecond, keyed: true},
	} {
		t.Run(fmt.Sprintf("count=%d/handler=%v/keyed=%v", c.count, c.hold, c.keyed), func(t *testing.T) {
			t.Parallel()
			rdb := newRedis(t)
			stream := streamName(t, rdb, "overlap")
			popts := []outboxredis.Option{outboxredis.WithDefaultStream(stream)}
			copts := []consume.Option{outboxredis.WithCount(c.count), outboxredis.WithMinIdle(2 * time.Second)}
			if c.keyed {
				popts = append(popts, outboxredis.WithKeyChain())
				copts = append(copts, outboxredis.WithKeyOrder())
			}
			if c.timeout > 0 {
				copts = append(copts, consume.WithHandlerTimeout(c.timeout))
			}
			pub := outboxredis.NewStreamPublisher(rdb, popts...)
			for i := range c.entries {
				e := envelope(fmt.Sprintf("ev-%03d", i), "t")
				if c.keyed {
					e.PartitionKey = "k"
				}
				must(t, pub.Publish(t.Context(), e))
			}
			h := newOverlaps(c.hold)
			for i := range 2 {
				run(t, newConsumer(t, rdb, stream, "g", fmt.Sprintf("c%d", i), h, consumerOpts(t, copts...)...))
			}
			eventually(t, 60*time.Second, "every entry handled and acknowledged", func() bool {
				return h.handled() == c.entries && settled(t, rdb, stream, "g")
			})
			time.Sleep(2500 * time.Millisecond) // past the min idle time: an entry adopted late would run again
			h.check(t, c.entries)
		})
	}
}
