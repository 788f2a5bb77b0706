package outboxasynq_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// outcomes wraps a Publisher and counts what it returns.
type outcomes struct {
	next                      relay.Publisher
	ok, unavailable, ordinary atomic.Int64
}

func (o *outcomes) Publish(ctx context.Context, e *outbox.Envelope) error {
	time.Sleep(time.Millisecond) // keep the relay busy long enough to be cut off mid-run
	err := o.next.Publish(ctx, e)
	switch {
	case err == nil:
		o.ok.Add(1)
	case outbox.IsUnavailable(err):
		o.unavailable.Add(1)
	default:
		o.ordinary.Add(1)
	}
	return err
}

// A running relay loses Redis (the proxy closes every connection and
// refuses new ones) and gets it back: no event spends an attempt or fails
// meanwhile, and afterwards every event is in asynq, once.
func TestRelaySurvivesARedisOutage(t *testing.T) {
	addr := testenv.RedisAddr(t)
	db, _ := pgDB(t)
	q := newQueue(t, addr)
	ins := newInspector(t, addr)
	proxy := testenv.NewProxy(t, addr)
	const n = 1000
	emitN(t, db, n, func(i int) outbox.Event {
		return outbox.Event{ID: eventID(i), Type: "outage.event", Topic: q, Payload: map[string]int{"i": i}}
	})

	pub := &outcomes{next: outboxasynq.NewPublisher(newClient(t, proxy.Addr()))}
	const batch = 50
	r, err := relay.New(db, pub, relay.WithConcurrency(2), relay.WithBatchSize(batch), relay.WithLogger(testLogger(t)))
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(ctx) }()
	defer func() {
		cancel()
		must(t, <-stopped)
	}()

	waitFor(t, 30*time.Second, "the relay to get going", func() bool { return pub.ok.Load() >= 100 })
	proxy.Cut()
	// Deliveries that succeeded before the cut may be recorded after it
	// (the batch in hand, and the previous one whose completion overlaps
	// the next claim): count publishes, not rows. Deliveries in flight at
	// the cut (at most the concurrency) may still have reached Redis.
	const inFlight = 2
	cutAt := pub.ok.Load()
	waitFor(t, 15*time.Second, "the relay to notice the outage", func() bool { return pub.unavailable.Load() > 0 })
	time.Sleep(2 * time.Second) // the relay retries against the cut proxy meanwhile

	// While Redis is away: nothing failed or died, no waiting event has
	// spent an attempt, and no event was published.
	var spent int64
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status IN ? AND attempts > 0",
		[]string{string(outbox.StatusPending), string(outbox.StatusFailed)}).Count(&spent).Error)
	if spent > 0 {
		t.Errorf("%d waiting events spent an attempt during the outage", spent)
	}
	for _, s := range []outbox.Status{outbox.StatusFailed, outbox.StatusDead} {
		if c := countStatus(t, db, s); c > 0 {
			t.Errorf("%d events %s during the outage", c, s)
		}
	}
	if pub.ordinary.Load() > 0 {
		t.Errorf("%d deliveries failed with an ordinary error during the outage", pub.ordinary.Load())
	}
	during := countStatus(t, db, outbox.StatusPublished)
	if pending := countStatus(t, db, outbox.StatusPending); pending == 0 || during >= n {
		t.Fatalf("the outage came too late to matter: %d pending, %d published", pending, during)
	}
	if during > cutAt+inFlight || pub.ok.Load() > cutAt+inFlight {
		t.Errorf("%d events marked published and %d delivered during the outage; %d were delivered before the cut",
			during, pub.ok.Load(), cutAt)
	}
	t.Logf("cut at %d published; %d deliveries reported unavailable", cutAt, pub.unavailable.Load())

	proxy.Restore()
	waitFor(t, 40*time.Second, "delivery to resume and complete", func() bool {
		return countStatus(t, db, outbox.StatusPublished) == n
	})
	var maxAttempts int
	must(t, db.Model(&outbox.OutboxEvent{}).Select("MAX(attempts)").Scan(&maxAttempts).Error)
	if maxAttempts != 1 {
		t.Errorf("an event took %d attempts: the outage spent attempts", maxAttempts)
	}
	qi, err := ins.GetQueueInfo(q)
	must(t, err)
	if qi.Pending != n || qi.Size != n {
		t.Errorf("asynq holds %d tasks (%d pending), want each of the %d events once", qi.Size, qi.Pending, n)
	}
}
