package relay_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// hangingPublisher delivers every event but the ones named in hang, whose
// deliveries do not return for 15s, far beyond the lease, or until the
// test ends (they ignore their context, as an endless call or a wedged
// client would). It records the order in which each partition key's
// events were delivered.
type hangingPublisher struct {
	hang    map[string]bool
	release chan struct{}

	mu     sync.Mutex
	count  map[string]int
	order  map[string][]string // partition key → event ids delivered, in order
	hangs  map[string]int
	starts map[string]int
}

func newHangingPublisher(t *testing.T, hang ...string) *hangingPublisher {
	p := &hangingPublisher{hang: map[string]bool{}, release: make(chan struct{}),
		count: map[string]int{}, order: map[string][]string{}, hangs: map[string]int{}, starts: map[string]int{}}
	for _, id := range hang {
		p.hang[id] = true
	}
	t.Cleanup(func() { close(p.release) })
	return p
}

func (p *hangingPublisher) Publish(_ context.Context, e *outbox.Envelope) error {
	p.mu.Lock()
	p.starts[e.ID]++
	if p.hang[e.ID] {
		p.hangs[e.ID]++
		p.mu.Unlock()
		select {
		case <-p.release:
		case <-time.After(15 * time.Second):
		}
		return nil
	}
	p.count[e.ID]++
	p.order[e.PartitionKey] = append(p.order[e.PartitionKey], e.ID)
	p.mu.Unlock()
	return nil
}

// An event whose delivery never returns costs an attempt of its own and
// nobody else's: 20 events of one key and 20 without a key, the fifth of
// each hanging whichever relay delivers it, three relays (one on SQLite),
// lease 2s, two attempts. The hanging events go dead after their two
// attempts; every other event is delivered once, in its key's order, and
// recorded published after one attempt: the events delivered before the
// hanging one are recorded as such, those never started go back without
// spending an attempt (they used to be charged by the rescue of the
// stalled batch, claimed again in the same run and charged again, until
// they were all dead), and a stalled delivery does not stop its relay.
func TestStalledDeliveryChargesOnlyItself(t *testing.T) {
	const perGroup = 20
	keyed := func(i int) outbox.Event {
		return outbox.Event{ID: fmt.Sprintf("k-%02d", i), Type: "test.event", PartitionKey: "k", Payload: map[string]int{"i": i}}
	}
	unkeyed := func(i int) outbox.Event {
		return outbox.Event{ID: fmt.Sprintf("u-%02d", i), Type: "test.event", Payload: map[string]int{"i": i}}
	}
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		t.Parallel()
		emitN(t, db, perGroup, keyed)
		emitN(t, db, perGroup, unkeyed)
		hanging := []string{keyed(4).ID, unkeyed(4).ID}
		pub := newHangingPublisher(t, hanging...)
		relays := 3
		if db.Dialector.Name() == testenv.SQLite {
			relays = 1
		}
		if !runRelaysUntil(t, db, relays, pub, 45*time.Second, func() bool {
			return countStatus(t, db, outbox.StatusDead) == 2 && countStatus(t, db, outbox.StatusPublished) == 2*perGroup-2
		}, relay.WithLease(2*time.Second), relay.WithMaxAttempts(2), relay.WithListen(false)) {
			t.Error("the events were not all published or dead within 45s")
		}

		var rows []outbox.OutboxEvent
		must(t, db.Order("id").Find(&rows).Error)
		for _, row := range rows {
			want, attempts := outbox.StatusPublished, 1
			if pub.hang[row.EventID] {
				want, attempts = outbox.StatusDead, 2
			}
			if row.Status != want || row.Attempts != attempts {
				t.Errorf("event %s: status %s after %d attempts (%v); want %s after %d",
					row.EventID, row.Status, row.Attempts, deref(row.LastError), want, attempts)
			}
		}
		pub.mu.Lock()
		defer pub.mu.Unlock()
		for id, n := range pub.count {
			if n != 1 {
				t.Errorf("event %s delivered %d times, want once", id, n)
			}
		}
		for _, id := range hanging {
			if pub.hangs[id] != 2 {
				t.Errorf("hanging event %s started %d times, want 2 (its attempts)", id, pub.hangs[id])
			}
		}
		want := make([]string, 0, perGroup-1)
		for i := range perGroup {
			if i != 4 {
				want = append(want, keyed(i).ID)
			}
		}
		if got := pub.order["k"]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("key k delivered in the order %v, want %v", got, want)
		}
	})
}

// runRelaysUntil runs n relays until done reports true or the timeout
// passes, then stops them, and reports whether done did. Unlike
// runRelays, it goes on to the test's checks after a timeout, so that a
// failure says what the relays left behind.
func runRelaysUntil(t *testing.T, db *gorm.DB, n int, pub relay.Publisher, timeout time.Duration, done func() bool, opts ...relay.Option) bool {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, n)
	for i := range n {
		r := newRelay(t, db, pub, append([]relay.Option{relay.WithWorkerID(fmt.Sprintf("relay-%d", i))}, opts...)...)
		go func() { errs <- r.Start(ctx) }()
	}
	ok := true
	for deadline := time.Now().Add(timeout); !done(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			ok = false
			break
		}
	}
	cancel()
	for range n {
		if err := <-errs; err != nil {
			t.Errorf("Start returned %v", err)
		}
	}
	return ok
}

// Outcomes are recorded as they become known: while one delivery of a
// batch is still running (a slow one, within the lease), the events
// delivered meanwhile are already recorded published, so that a relay
// that crashed now would not have them rescued and delivered again.
func TestOutcomesAreRecordedWhileTheBatchIsDelivered(t *testing.T) {
	const n = 10
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, n, event)
		slow := event(0).ID
		release := make(chan struct{})
		pub := relay.PublisherFunc(func(ctx context.Context, e *outbox.Envelope) error {
			if e.ID == slow {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return nil
		})
		r := newRelay(t, db, pub, relay.WithLease(8*time.Second), relay.WithListen(false))
		done := make(chan relay.Result, 1)
		go func() {
			res, err := r.RunOnce(context.Background())
			if err != nil {
				t.Error(err)
			}
			done <- res
		}()
		deadline := time.Now().Add(5 * time.Second)
		for countStatus(t, db, outbox.StatusPublished) < n-1 {
			if time.Now().After(deadline) {
				got := countStatus(t, db, outbox.StatusPublished)
				close(release)
				<-done
				t.Fatalf("%d of the %d events delivered while one was slow were recorded published within 5s; want all", got, n-1)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if row := statusOf(t, db, slow); row.Status != outbox.StatusPublishing {
			t.Errorf("the slow event is %s while its delivery runs", row.Status)
		}
		close(release)
		if res := <-done; res.Claimed != n || res.Published != n {
			t.Errorf("RunOnce: %+v; want %d claimed and published", res, n)
		}
	})
}
