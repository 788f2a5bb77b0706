package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/relay"
)

// 4 relays × 20,000 events through an in-process handler that counts:
// every event is delivered exactly once, none is lost, and no event is
// held by two relays at once.
func TestManyRelaysDeliverEveryEventOnce(t *testing.T) {
	n := 20000
	if testing.Short() {
		n = 2000
	}
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, n, event)
		store, err := idempotency.NewStore(db)
		must(t, err)
		must(t, store.Migrate(t.Context()))
		mux := inproc.NewMux(store, inproc.WithLogger(testLogger(t)))
		var mu sync.Mutex
		counts := make(map[string]int, n)
		var handled atomic.Int64
		must(t, mux.HandleFunc("test.event", "count", func(_ context.Context, e *outbox.Envelope) error {
			mu.Lock()
			counts[e.ID]++
			mu.Unlock()
			handled.Add(1)
			return nil
		}))
		tracker := track(t, mux)
		start := time.Now()
		runRelays(t, db, 4, tracker, 8*time.Minute, func() bool { return handled.Load() >= int64(n) },
			relay.WithBatchSize(200), relay.WithPollInterval(20*time.Millisecond))
		t.Logf("%d events through 4 relays in %v", n, time.Since(start).Round(time.Millisecond))

		if len(counts) != n {
			t.Errorf("%d distinct events handled, want %d", len(counts), n)
		}
		for id, c := range counts {
			if c != 1 {
				t.Errorf("event %s handled %d times", id, c)
			}
		}
		if got := countStatus(t, db, outbox.StatusPublished); got != int64(n) {
			t.Errorf("%d published rows, want %d", got, n)
		}
		// Each event spent one attempt: no claim overlapped another and no
		// lease expired. A batch claimed ahead and handed back undelivered
		// (it waited past half its lease behind a slow one, as on a loaded
		// machine) is claimed again without spending one.
		spent, released := claimCounts(t, db)
		if spent != 0 {
			t.Errorf("%d events spent more than one attempt", spent)
		}
		t.Logf("%d events handed back undelivered and claimed again", released)
		if tracker.starts != n {
			t.Errorf("%d deliveries for %d events", tracker.starts, n)
		}
	})
}

// Per-key order under 4 relays with failures injected: the successful
// deliveries of each key follow the key's commit order, and a key never
// has two deliveries in flight.
func TestPartitionKeyOrderUnderFailures(t *testing.T) {
	const keys, perKey, unkeyed = 8, 40, 100
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, keys*perKey+unkeyed, func(i int) outbox.Event {
			e := event(i)
			if i < keys*perKey {
				e.PartitionKey = fmt.Sprintf("key-%d", i%keys)
			}
			return e
		})
		var (
			mu   sync.Mutex
			seen = map[string][]string{} // key -> delivered event ids, in order
			done atomic.Int64
		)
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			if rand.IntN(4) == 0 {
				return errFlaky
			}
			if e.PartitionKey != "" {
				mu.Lock()
				seen[e.PartitionKey] = append(seen[e.PartitionKey], e.ID)
				mu.Unlock()
			}
			done.Add(1)
			return nil
		})
		runRelays(t, db, 4, trackOrdered(t, pub), 2*time.Minute, func() bool { return done.Load() >= keys*perKey+unkeyed },
			relay.WithBatchSize(25), relay.WithPollInterval(5*time.Millisecond),
			relay.WithBackoff(func(int) time.Duration { return time.Duration(rand.IntN(3)) * time.Millisecond }))

		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			ids := seen[key]
			if len(ids) != perKey {
				t.Errorf("%s: %d deliveries, want %d", key, len(ids), perKey)
			}
			for j, id := range ids {
				if want := event(j*keys + k).ID; id != want {
					t.Fatalf("%s: delivery %d was %s, want %s (order %v)", key, j, id, want, ids)
				}
			}
		}
	})
}

func TestDeadEventDoesNotBlockItsKey(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 3, func(i int) outbox.Event { e := event(i); e.PartitionKey = "k"; return e })
		pub := newRecorder()
		pub.fail = func(e *outbox.Envelope) error {
			if e.ID == "ev-000000" {
				return outbox.Permanent(fmt.Errorf("poison"))
			}
			return nil
		}
		r := newRelay(t, db, pub)
		for range 4 {
			_, err := r.RunOnce(t.Context())
			must(t, err)
		}
		if pub.delivered() != 2 || statusOf(t, db, "ev-000000").Status != outbox.StatusDead {
			t.Fatalf("%d delivered; want the two after the dead one", pub.delivered())
		}
		if pub.deliveries[0].ID != "ev-000001" || pub.deliveries[1].ID != "ev-000002" {
			t.Errorf("order %s, %s", pub.deliveries[0].ID, pub.deliveries[1].ID)
		}
	})
}

// Writers of one key commit out of id order unless the write path
// serialises them: each transaction emits, waits a little, then commits,
// while relays deliver. The delivery order must be the commit order.
func TestConcurrentWritersOfOneKeyAreDeliveredInCommitOrder(t *testing.T) {
	const writers, perWriter = 4, 40
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		var (
			seq      atomic.Int64
			mu       sync.Mutex
			order    = map[string]int64{} // event id -> commit sequence
			got      []string
			received atomic.Int64
		)
		pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			mu.Lock()
			got = append(got, e.ID)
			mu.Unlock()
			received.Add(1)
			return nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		relays := make(chan error, 2)
		for i := range 2 {
			r := newRelay(t, db, pub, relay.WithWorkerID(fmt.Sprint("r", i)), relay.WithPollInterval(2*time.Millisecond))
			go func() { relays <- r.Start(ctx) }()
		}
		var wg sync.WaitGroup
		for w := range writers {
			wg.Go(func() {
				for i := range perWriter {
					id := fmt.Sprintf("w%d-%03d", w, i)
					for {
						err := db.Transaction(func(tx *gorm.DB) error {
							if err := outbox.Emit(tx, outbox.Event{ID: id, Type: "t", PartitionKey: "the-key"}); err != nil {
								return err
							}
							// Emit holds the key until commit: this sequence is the commit order.
							mu.Lock()
							order[id] = seq.Add(1)
							mu.Unlock()
							time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
							return nil
						})
						if isDeadlock(err) {
							continue
						}
						must(t, err)
						break
					}
				}
			})
		}
		wg.Wait()
		deadline := time.Now().Add(time.Minute)
		for received.Load() < writers*perWriter && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		cancel()
		<-relays
		<-relays
		if len(got) != writers*perWriter {
			t.Fatalf("%d delivered, want %d", len(got), writers*perWriter)
		}
		for i := 1; i < len(got); i++ {
			if order[got[i]] < order[got[i-1]] {
				t.Fatalf("delivered %s (commit #%d) after %s (commit #%d)", got[i], order[got[i]], got[i-1], order[got[i-1]])
			}
		}
	})
}

func isDeadlock(err error) bool {
	return err != nil && (contains(err.Error(), "Error 1213") || contains(err.Error(), "deadlock detected"))
}

func contains(s, sub string) bool {
	return len(s) >= len(sub) && (s == sub || len(sub) == 0 || indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}
