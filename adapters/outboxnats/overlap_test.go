package outboxnats_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/consume"
)

// overlaps is a handler that runs for a while and notes every event
// handled while another run of it was in progress, and each event's runs.
type overlaps struct {
	hold time.Duration

	mu      sync.Mutex
	running map[string]int
	runs    map[string]int
	twice   map[string]int // event id → runs that started while another ran
}

func newOverlaps(hold time.Duration) *overlaps {
	return &overlaps{hold: hold, running: map[string]int{}, runs: map[string]int{}, twice: map[string]int{}}
}

func (o *overlaps) Handle(_ context.Context, e *outbox.Envelope) error {
	o.mu.Lock()
	if o.running[e.ID] > 0 {
		o.twice[e.ID]++
	}
	o.running[e.ID]++
	o.runs[e.ID]++
	o.mu.Unlock()
	time.Sleep(o.hold)
	o.mu.Lock()
	o.running[e.ID]--
	o.mu.Unlock()
	return nil
}

// check fails t for events handled twice at once, or more than once.
func (o *overlaps) check(t *testing.T, n int) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.twice) > 0 {
		t.Errorf("%d of %d messages were handled by two consumers at once: %v", len(o.twice), n, o.twice)
	}
	again := map[string]int{}
	for id, k := range o.runs {
		if k != 1 {
			again[id] = k
		}
	}
	if len(again) > 0 || len(o.runs) != n {
		t.Errorf("%d messages handled, want %d, each once; handled more than once: %v", len(o.runs), n, again)
	}
}

// No message of a fetched batch is handled by two consumers at once, for
// any batch size and handler time within the documented bounds: two
// consumers of one durable, an ack wait of 2s, and batches whose last
// message waits far longer than that behind the others (or a handler run,
// within its timeout, longer than the ack wait). A message waiting in a
// batch, or running, is kept in progress: it is not delivered again while
// this consumer holds it, and each is handled once.
func TestConsumersNeverHandleAMessageTwiceAtOnce(t *testing.T) {
	for _, c := range []struct {
		batch, messages int
		hold, timeout   time.Duration
	}{
		{batch: 10, messages: 10, hold: 600 * time.Millisecond},
		{batch: 40, messages: 40, hold: 150 * time.Millisecond},
		{batch: 2, messages: 2, hold: 2500 * time.Millisecond, timeout: 5 * time.Second},
	} {
		t.Run(fmt.Sprintf("batch=%d/handler=%v", c.batch, c.hold), func(t *testing.T) {
			t.Parallel()
			js := newJS(t)
			stream := newStream(t, js)
			es := make([]*outbox.Envelope, c.messages)
			for i := range es {
				es[i] = envelope(eventID(i), "orders")
			}
			publishAll(t, js, stream, es...)
			h := newOverlaps(c.hold)
			opts := []consume.Option{outboxnats.WithBatch(c.batch), outboxnats.WithAckWait(2 * time.Second)}
			if c.timeout > 0 {
				opts = append(opts, consume.WithHandlerTimeout(c.timeout))
			}
			for range 2 {
				cons, err := outboxnats.NewConsumer(js, stream, "shared", h, consumerOpts(t, opts...)...)
				must(t, err)
				run(t, cons)
			}
			waitFor(t, 60*time.Second, "every message handled and acknowledged", func() bool {
				h.mu.Lock()
				handled := len(h.runs)
				h.mu.Unlock()
				return handled == c.messages && settled(t, js, stream, "shared")()
			})
			time.Sleep(2500 * time.Millisecond) // past the ack wait: a message redelivered would run again
			h.check(t, c.messages)
		})
	}
}
