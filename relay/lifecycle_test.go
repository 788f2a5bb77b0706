package relay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// A relay stopped mid-batch finishes the delivery in hand, releases the
// rest without spending their attempts, returns nil, and another relay
// delivers what it released.
func TestStopMidBatch(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 10, event)
		ctx, cancel := context.WithCancel(t.Context())
		var delivered atomic.Int32
		pub := relay.PublisherFunc(func(pctx context.Context, e *outbox.Envelope) error {
			if delivered.Add(1) == 3 {
				cancel() // stop while delivering the third event
				time.Sleep(50 * time.Millisecond)
				if pctx.Err() != nil {
					return errors.New("the delivery in hand was cancelled with the relay")
				}
			}
			return nil
		})
		r := newRelay(t, db, pub, relay.WithConcurrency(1))
		done := make(chan error, 1)
		go func() { done <- r.Start(ctx) }()
		select {
		case err := <-done:
			must(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Start did not return after its context ended")
		}
		if n := countStatus(t, db, outbox.StatusPublished); n != 3 {
			t.Errorf("%d published, want the 3 started", n)
		}
		if n := countStatus(t, db, outbox.StatusPublishing); n != 0 {
			t.Errorf("%d events left publishing", n)
		}
		var spent int64
		must(t, db.Model(&outbox.OutboxEvent{}).Where("status = 'pending' AND attempts <> 0").Count(&spent).Error)
		if spent != 0 {
			t.Errorf("%d released events spent an attempt", spent)
		}
		rest := newRecorder()
		res, err := newRelay(t, db, rest).RunOnce(t.Context())
		must(t, err)
		if res.Published != 7 {
			t.Errorf("the next relay delivered %+v, want the 7 released", res)
		}
	})
}

// A relay whose lease expires while its handler is blocked (a paused
// process) completes nothing: another relay redelivers the events, and the
// stale relay's completions are refused, counted and logged, not errors.
func TestExpiredLeaseIsFenced(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 3, event)
		blocked := make(chan struct{})
		unblock := make(chan struct{})
		var once sync.Once
		stale := newRelay(t, db, relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			once.Do(func() { close(blocked) })
			<-unblock
			return nil
		}), relay.WithWorkerID("stale"), relay.WithLease(time.Minute))
		var staleRes relay.Result
		staleErr := make(chan error, 1)
		go func() {
			var err error
			staleRes, err = stale.RunOnce(context.Background())
			staleErr <- err
		}()
		<-blocked
		// The stale relay's lease runs out while it is blocked.
		must(t, db.Exec("UPDATE outbox_events SET locked_until = ? WHERE locked_by = 'stale'", past(db)).Error)

		fresh := newRecorder()
		res, err := newRelay(t, db, fresh, relay.WithWorkerID("fresh")).RunOnce(t.Context())
		must(t, err)
		if res.Published != 3 {
			t.Fatalf("the second relay: %+v, want the 3 events redelivered", res)
		}
		close(unblock)
		must(t, <-staleErr)
		if staleRes.Lost != 3 || staleRes.Published != 0 {
			t.Errorf("the stale relay: %+v, want 3 lost completions", staleRes)
		}
		for i := range 3 {
			row := statusOf(t, db, event(i).ID)
			// claimed by stale (1), rescued (2), claimed by fresh (3)
			if row.Status != outbox.StatusPublished || row.ClaimVersion != 3 || row.Attempts != 2 {
				t.Errorf("row %+v", row)
			}
		}
	})
}

func TestStartTwiceIsRefused(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	r := newRelay(t, db, newRecorder())
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	time.Sleep(50 * time.Millisecond)
	if err := r.Start(ctx); !errors.Is(err, relay.ErrRunning) {
		t.Errorf("second Start: %v, want ErrRunning", err)
	}
	if _, err := r.RunOnce(ctx); !errors.Is(err, relay.ErrRunning) {
		t.Errorf("RunOnce while running: %v, want ErrRunning", err)
	}
	cancel()
	must(t, <-done)
}

func TestConcurrencyWithinOneRelay(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 40, event)
		var inFlight, peak atomic.Int32
		pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error {
			n := inFlight.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(5 * time.Millisecond)
			inFlight.Add(-1)
			return nil
		})
		res, err := newRelay(t, db, pub, relay.WithConcurrency(4), relay.WithBatchSize(40)).RunOnce(t.Context())
		must(t, err)
		if res.Published != 40 || peak.Load() != 4 {
			t.Errorf("published %d with at most %d at once, want 40 with 4", res.Published, peak.Load())
		}
	})
}

// batchPub records PublishBatch calls and fails the events it is told to.
type batchPub struct {
	calls [][]string
	fail  map[string]error
}

func (b *batchPub) Publish(context.Context, *outbox.Envelope) error {
	return errors.New("Publish called on a BatchPublisher")
}

func (b *batchPub) PublishBatch(_ context.Context, es []*outbox.Envelope) []error {
	ids := make([]string, len(es))
	errs := make([]error, len(es))
	for i, e := range es {
		ids[i] = e.ID
		errs[i] = b.fail[e.ID]
	}
	b.calls = append(b.calls, ids)
	return errs
}

func TestBatchPublisherGetsTheBatch(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 30, event)
		pub := &batchPub{fail: map[string]error{"ev-000007": errFlaky, "ev-000008": outbox.Permanent(errFlaky)}}
		res, err := newRelay(t, db, pub, relay.WithBatchSize(30)).RunOnce(t.Context())
		must(t, err)
		if len(pub.calls) != 1 || len(pub.calls[0]) != 30 {
			t.Fatalf("PublishBatch calls %v, want one of 30", pub.calls)
		}
		if res.Published != 28 || res.Failed != 1 || res.Dead != 1 {
			t.Errorf("result %+v", res)
		}
	})
}

func TestListenWakesTheRelay(t *testing.T) {
	db := testenv.Open(t, testenv.Postgres)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	pub := newRecorder()
	got := make(chan time.Time, 1)
	pub.fail = func(*outbox.Envelope) error { got <- time.Now(); return nil }
	// Polling once an hour: only NOTIFY can deliver within the test.
	r := newRelay(t, db, pub, relay.WithPollInterval(time.Hour))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	time.Sleep(300 * time.Millisecond) // let the first (empty) claim pass and LISTEN start
	committed := time.Now()
	emitN(t, db, 1, event)
	select {
	case at := <-got:
		t.Logf("commit to delivery: %v", at.Sub(committed))
	case <-time.After(10 * time.Second):
		t.Fatal("the relay was not woken by NOTIFY")
	}
	cancel()
	must(t, <-done)
}
