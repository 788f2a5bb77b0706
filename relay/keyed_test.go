package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// A claim takes a key's head run, delivered in order; the event that
// fails holds back the later events of its key, which go back without
// spending an attempt and follow it once it is published.
func TestHeadRunStopsAtAFailure(t *testing.T) {
	for _, batched := range []bool{false, true} {
		t.Run(fmt.Sprint("batch-publisher=", batched), func(t *testing.T) {
			eachDB(t, func(t *testing.T, db *gorm.DB) {
				emitN(t, db, 10, func(i int) outbox.Event { e := event(i); e.PartitionKey = "k"; return e })
				pub := &keyedPub{fail: func(e *outbox.Envelope) error {
					if e.ID == "ev-000003" && e.Attempt == 1 {
						return errFlaky
					}
					return nil
				}}
				var p relay.Publisher = pub
				if batched {
					p = &keyedBatchPub{keyedPub: pub}
				}
				r := newRelay(t, db, p, relay.WithBatchSize(20))

				res, err := r.RunOnce(t.Context())
				must(t, err)
				if want := (relay.Result{Claimed: 10, Published: 3, Failed: 1, Released: 6}); res != want {
					t.Fatalf("first batch %+v, want %+v", res, want)
				}
				if got, want := pub.attempted(), eventIDs(0, 1, 2, 3); !slices.Equal(got, want) {
					t.Fatalf("deliveries %v, want %v", got, want)
				}
				for i := 4; i < 10; i++ {
					row := statusOf(t, db, event(i).ID)
					if row.Status != outbox.StatusPending || row.Attempts != 0 {
						t.Errorf("%s after its key's failure: %s with %d attempts, want pending with 0", row.EventID, row.Status, row.Attempts)
					}
				}

				res, err = r.RunOnce(t.Context())
				must(t, err)
				if want := (relay.Result{Claimed: 7, Published: 7}); res != want {
					t.Fatalf("second batch %+v, want %+v", res, want)
				}
				if got, want := pub.attempted(), eventIDs(0, 1, 2, 3, 3, 4, 5, 6, 7, 8, 9); !slices.Equal(got, want) {
					t.Errorf("deliveries %v, want %v", got, want)
				}
				if batched {
					for _, call := range pub.calls {
						if len(call) != 1 {
							t.Errorf("PublishBatch got %v: two events of one key in one call", call)
						}
					}
				}
			})
		})
	}
}

func eventIDs(is ...int) []string {
	out := make([]string, len(is))
	for n, i := range is {
		out[n] = event(i).ID
	}
	return out
}

// keyedPub records every delivery attempt, in order, and fails those fail
// says to.
type keyedPub struct {
	mu    sync.Mutex
	tries []string
	calls [][]string // PublishBatch calls, through keyedBatchPub
	fail  func(*outbox.Envelope) error
}

func (p *keyedPub) Publish(_ context.Context, e *outbox.Envelope) error {
	p.mu.Lock()
	p.tries = append(p.tries, e.ID)
	p.mu.Unlock()
	return p.fail(e)
}

func (p *keyedPub) attempted() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.tries)
}

// keyedBatchPub is keyedPub as a BatchPublisher.
type keyedBatchPub struct{ *keyedPub }

func (p *keyedBatchPub) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := make([]error, len(es))
	call := make([]string, len(es))
	for i, e := range es {
		call[i] = e.ID
		errs[i] = p.Publish(ctx, e)
	}
	p.mu.Lock()
	p.calls = append(p.calls, call)
	p.mu.Unlock()
	return errs
}

// Keyed backlogs drained by 4 relays with failures injected (retries and
// dead events): every event ends published or dead, each key's successful
// deliveries follow its commit order, no key has two deliveries in flight,
// and a batch publisher never gets two events of one key in one call.
func TestKeyedBacklogOrderAcrossRelays(t *testing.T) {
	cases := []struct{ keys, perKey int }{{3, 150}, {60, 8}}
	for _, c := range cases {
		for _, batched := range []bool{false, true} {
			t.Run(fmt.Sprintf("keys=%d/batch-publisher=%v", c.keys, batched), func(t *testing.T) {
				eachDB(t, func(t *testing.T, db *gorm.DB) {
					drainKeyedWithFailures(t, db, c.keys, c.perKey, batched)
				})
			})
		}
	}
}

func drainKeyedWithFailures(t *testing.T, db *gorm.DB, keys, perKey int, batched bool) {
	const unkeyed = 100
	total := keys*perKey + unkeyed
	emitN(t, db, total, func(i int) outbox.Event {
		e := event(i)
		if i < keys*perKey {
			e.PartitionKey = fmt.Sprintf("key-%03d", i%keys)
		}
		return e
	})
	var (
		mu       sync.Mutex
		seen     = map[string][]string{} // key -> published event ids, in order
		finished atomic.Int64
	)
	outcome := func(e *outbox.Envelope) error {
		var err error
		switch n := rand.IntN(60); {
		case n < 2:
			err = outbox.Permanent(errFlaky)
		case n < 12:
			err = errFlaky
		}
		if err == nil && e.PartitionKey != "" {
			mu.Lock()
			seen[e.PartitionKey] = append(seen[e.PartitionKey], e.ID)
			mu.Unlock()
		}
		if err == nil || outbox.IsPermanent(err) {
			finished.Add(1)
		}
		return err
	}
	tracker := trackOrdered(t, relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error { return outcome(e) }))
	var pub relay.Publisher = tracker
	if batched {
		pub = &trackedBatch{h: tracker}
	}
	runRelays(t, db, 4, pub, 3*time.Minute, func() bool { return finished.Load() >= int64(total) },
		relay.WithBatchSize(40), relay.WithPollInterval(5*time.Millisecond), relay.WithMaxAttempts(1000),
		relay.WithBackoff(func(int) time.Duration { return time.Duration(rand.IntN(3)) * time.Millisecond }))

	dead := countStatus(t, db, outbox.StatusDead)
	if got := countStatus(t, db, outbox.StatusPublished) + dead; got != int64(total) {
		t.Errorf("%d events published or dead, want %d", got, total)
	}
	for k := range keys {
		key := fmt.Sprintf("key-%03d", k)
		var deadIDs []string
		must(t, db.Model(&outbox.OutboxEvent{}).Where("partition_key = ? AND status = ?", key, string(outbox.StatusDead)).
			Pluck("event_id", &deadIDs).Error)
		var want []string
		for j := range perKey {
			if id := event(j*keys + k).ID; !slices.Contains(deadIDs, id) {
				want = append(want, id)
			}
		}
		if !slices.Equal(seen[key], want) {
			t.Fatalf("%s: published %v, want %v (dead: %v)", key, seen[key], want, deadIDs)
		}
	}
	t.Logf("%d events, %d dead, %d deliveries", total, dead, tracker.starts)
}

// trackedBatch is a BatchPublisher that delivers each envelope through a
// holdTracker, and fails the test if one call holds two events of a key.
type trackedBatch struct{ h *holdTracker }

func (b *trackedBatch) Publish(ctx context.Context, e *outbox.Envelope) error {
	return b.h.Publish(ctx, e)
}

func (b *trackedBatch) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	keys := map[string]string{}
	for _, e := range es {
		if e.PartitionKey == "" {
			continue
		}
		if other, ok := keys[e.PartitionKey]; ok {
			b.h.t.Errorf("key %s: %s and %s in one PublishBatch call", e.PartitionKey, other, e.ID)
		}
		keys[e.PartitionKey] = e.ID
	}
	errs := make([]error, len(es))
	var wg sync.WaitGroup
	for i, e := range es { // at once, as a pipeline would
		wg.Go(func() { errs[i] = b.h.Publish(ctx, e) })
	}
	wg.Wait()
	return errs
}

// With more keys than a batch holds, keys take turns: each claim starts
// after the key where the previous one stopped, so no key waits for the
// others to drain.
func TestKeysTakeTurns(t *testing.T) {
	const keys, perKey, batch = 30, 5, 10
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		// Keys in reverse commit order, so that key order and age differ.
		emitN(t, db, keys*perKey, func(i int) outbox.Event {
			e := event(i)
			e.PartitionKey = fmt.Sprintf("key-%02d", keys-1-i%keys)
			return e
		})
		pub := newRecorder()
		r := newRelay(t, db, pub, relay.WithBatchSize(batch))
		for range keys / batch {
			res, err := r.RunOnce(t.Context())
			must(t, err)
			if res.Published != batch {
				t.Fatalf("batch %+v", res)
			}
		}
		per := map[string]int{}
		for _, e := range pub.deliveries {
			per[e.PartitionKey]++
		}
		if len(per) != keys {
			t.Errorf("after %d batches of %d, %d keys had a turn, want %d: %v", keys/batch, batch, len(per), keys, per)
		}
	})
}

// Keys whose head waits for a retry, each with a backlog, do not hide the
// keys behind them, however many there are: every other event is
// delivered, and nothing behind a waiting head is.
func TestWaitingKeysDoNotHideTheOthers(t *testing.T) {
	const blocked, blockedEach, good, goodEach, unkeyed = 20, 10, 10, 5, 20
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		n := 0
		emitN(t, db, blocked*blockedEach, func(i int) outbox.Event {
			e := event(n + i)
			e.PartitionKey = fmt.Sprintf("a-%02d", i%blocked)
			return e
		})
		n += blocked * blockedEach
		emitN(t, db, good*goodEach, func(i int) outbox.Event {
			e := event(n + i)
			e.PartitionKey = fmt.Sprintf("b-%02d", i%good)
			return e
		})
		n += good * goodEach
		emitN(t, db, unkeyed, func(i int) outbox.Event { return event(n + i) })

		pub := newRecorder()
		pub.fail = func(e *outbox.Envelope) error {
			if strings.HasPrefix(e.PartitionKey, "a-") {
				return errFlaky
			}
			return nil
		}
		r := newRelay(t, db, pub, relay.WithBatchSize(8), relay.WithBackoff(func(int) time.Duration { return time.Hour }))
		for range 40 {
			res, err := r.RunOnce(t.Context())
			must(t, err)
			if res.Claimed == 0 {
				break
			}
		}
		if got, want := pub.delivered(), good*goodEach+unkeyed; got != want {
			t.Errorf("%d delivered, want %d", got, want)
		}
		if got := countStatus(t, db, outbox.StatusFailed); got != blocked {
			t.Errorf("%d failed, want %d (the head of each waiting key)", got, blocked)
		}
		var attempted int64
		must(t, db.Model(&outbox.OutboxEvent{}).Where("partition_key LIKE 'a-%' AND attempts > 0").Count(&attempted).Error)
		if attempted != blocked {
			t.Errorf("%d events of waiting keys were attempted, want %d", attempted, blocked)
		}
	})
}

// A key's run that cannot be delivered within the lease stops at the
// deadline: what was not started goes back without spending an attempt,
// instead of being published with an expired context and failing.
func TestLongRunStopsAtTheDeadline(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 20, func(i int) outbox.Event { e := event(i); e.PartitionKey = "slow"; return e })
		pub := relay.PublisherFunc(func(ctx context.Context, _ *outbox.Envelope) error {
			if err := ctx.Err(); err != nil {
				return err // started after the deadline
			}
			time.Sleep(400 * time.Millisecond)
			return nil
		})
		// A lease of 4s leaves a margin of 400ms for the completion after
		// the deadline, enough on a loaded machine.
		res, err := newRelay(t, db, pub, relay.WithLease(4*time.Second), relay.WithBatchSize(20)).RunOnce(t.Context())
		must(t, err)
		if res.Failed != 0 || res.Published == 0 || res.Released == 0 || res.Published+res.Released != 20 {
			t.Fatalf("%+v, want some published, the rest released, none failed", res)
		}
		var spent int64
		must(t, db.Model(&outbox.OutboxEvent{}).Where("status = 'pending' AND attempts <> 0").Count(&spent).Error)
		if spent != 0 {
			t.Errorf("%d released events spent an attempt", spent)
		}
	})
}
