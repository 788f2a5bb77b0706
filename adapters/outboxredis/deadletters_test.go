package outboxredis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/consume"
)

// The admin page and the CLI take them as consume's interfaces.
var _ interface {
	consume.DeadLetterReader
	consume.DeadLetterReplayer
} = (*outboxredis.DeadLetters)(nil)

// The dead-letter stream read back a page at a time, oldest first, and
// replayed: the replayed messages are consumed again, and leave the dead
// letter; an id no longer there is skipped.
func TestDeadLettersListPageAndReplay(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "dead-read")
	dead := stream + ":dead"
	var fixed atomic.Bool
	var mu sync.Mutex
	handled := map[string]int{}
	h := consume.HandlerFunc(func(_ context.Context, e *outbox.Envelope) error {
		if !fixed.Load() {
			return outbox.Permanent(errors.New("no such customer"))
		}
		mu.Lock()
		defer mu.Unlock()
		handled[e.ID]++
		return nil
	})
	run(t, newConsumer(t, rdb, stream, "g", "c", h, consumerOpts(t, outboxredis.WithDeadLetterStream(dead))...))
	var es []*outbox.Envelope
	for i := range 5 {
		es = append(es, envelope(fmt.Sprintf("ev-%d", i), "t"))
	}
	publish(t, rdb, stream, es...)
	eventually(t, 10*time.Second, "five dead letters", func() bool { return rdb.XLen(t.Context(), dead).Val() == 5 })

	dl := outboxredis.NewDeadLetters(rdb, dead)
	var all []consume.DeadMessage
	var sizes []int
	for cursor := ""; ; {
		page, next, err := dl.DeadLetters(t.Context(), cursor, 2)
		must(t, err)
		all, sizes = append(all, page...), append(sizes, len(page))
		if next == "" {
			break
		}
		cursor = next
	}
	if fmt.Sprint(sizes) != "[2 2 1]" {
		t.Errorf("pages of %v, want [2 2 1]", sizes)
	}
	for i, m := range all {
		if m.Envelope == nil || m.Envelope.ID != es[i].ID || m.Source != stream+" (group g)" || m.Deliveries != 1 ||
			!strings.Contains(m.Reason, "no such customer") || time.Since(m.DeadAt) > time.Minute {
			t.Errorf("dead letter %d: %+v", i, m)
		}
	}

	fixed.Store(true)
	n, err := dl.ReplayDead(t.Context(), all[0].ID, all[2].ID, all[4].ID, "1-1")
	must(t, err)
	if n != 3 {
		t.Errorf("replayed %d, want 3", n)
	}
	eventually(t, 10*time.Second, "the replayed messages consumed again", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 3
	})
	mu.Lock()
	defer mu.Unlock()
	for _, i := range []int{0, 2, 4} {
		if handled[es[i].ID] != 1 {
			t.Errorf("event %s handled %d times after its replay, want 1", es[i].ID, handled[es[i].ID])
		}
	}
	left, _, err := dl.DeadLetters(t.Context(), "", 10)
	must(t, err)
	if len(left) != 2 || left[0].Envelope.ID != es[1].ID || left[1].Envelope.ID != es[3].ID {
		t.Errorf("dead letter after the replay holds %+v, want ev-1 and ev-3", left)
	}
}

// A handler's delay is the entry's own: handed back with outbox.Snooze,
// it is not delivered again before the snooze ends, while the retry delay
// is much shorter; and the snoozed runs do not count.
func TestSnoozedEntryWaitsItsOwnDelay(t *testing.T) {
	rdb := newRedis(t)
	stream := streamName(t, rdb, "snooze")
	const snooze = 700 * time.Millisecond
	var mu sync.Mutex
	var runs []time.Time
	var attempts []int
	h := consume.HandlerFunc(func(ctx context.Context, _ *outbox.Envelope) error {
		d, _ := consume.DeliveryFrom(ctx)
		mu.Lock()
		defer mu.Unlock()
		runs, attempts = append(runs, time.Now()), append(attempts, d.Attempt)
		if len(runs) < 3 {
			return outbox.Snooze(errors.New("the warehouse opens later"), snooze)
		}
		return nil
	})
	run(t, newConsumer(t, rdb, stream, "g", "c", h, consumerOpts(t, consume.WithMaxDeliveries(1))...))
	publish(t, rdb, stream, envelope("ev", "t"))
	eventually(t, 10*time.Second, "the third run, and the acknowledgement", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == 3 && settled(t, rdb, stream, "g")
	})
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(runs); i++ {
		if gap := runs[i].Sub(runs[i-1]); gap < snooze {
			t.Errorf("run %d came %v after the snoozed run before it, want at least %v", i+1, gap, snooze)
		}
	}
	if fmt.Sprint(attempts) != "[1 1 1]" {
		t.Errorf("attempts %v, want [1 1 1]: snoozed runs do not count", attempts)
	}
}
