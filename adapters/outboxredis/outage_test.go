package outboxredis_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// countingPublisher counts the outcomes of a BatchPublisher.
type countingPublisher struct {
	*outboxredis.StreamPublisher
	unavailable, other atomic.Int64
}

func (p *countingPublisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := p.StreamPublisher.PublishBatch(ctx, es)
	for _, err := range errs {
		switch {
		case outbox.IsUnavailable(err):
			p.unavailable.Add(1)
		case err != nil:
			p.other.Add(1)
		}
	}
	return errs
}

func maxAttempts(t testing.TB, db *gorm.DB) int {
	t.Helper()
	var n int
	must(t, db.Model(&outbox.OutboxEvent{}).Select("COALESCE(MAX(attempts), 0)").Scan(&n).Error)
	return n
}

// TestRedisOutageSpendsNoAttempts cuts Redis away from a running relay:
// deliveries are released without spending attempts, nothing is lost, and
// delivery resumes when Redis is back.
func TestRedisOutageSpendsNoAttempts(t *testing.T) {
	const before, during = 20, 60
	direct := newRedis(t)
	proxy := testenv.NewProxy(t, testenv.RedisAddr(t))
	viaProxy := newRedisAt(t, proxy.Addr())
	stream := streamName(t, direct, "outage")
	db, _ := outboxDB(t, testenv.Postgres)

	pub := &countingPublisher{StreamPublisher: outboxredis.NewStreamPublisher(viaProxy, outboxredis.WithDefaultStream(stream))}
	startRelay(t, newRelay(t, db, pub, relay.WithBatchSize(25), relay.WithMaxAttempts(2)))
	emit := func(from, n int) {
		must(t, db.Transaction(func(tx *gorm.DB) error {
			for i := from; i < from+n; i++ {
				if err := outbox.Emit(tx, outbox.Event{Type: "t", Payload: map[string]int{"i": i}}); err != nil {
					return err
				}
			}
			return nil
		}))
	}
	emit(0, before)
	eventually(t, 10*time.Second, "the first events", func() bool { return countStatus(t, db, outbox.StatusPublished) == before })

	proxy.Cut()
	emit(before, during)
	eventually(t, 10*time.Second, "two unavailable rounds", func() bool { return pub.unavailable.Load() >= 2*25 })
	if got := countStatus(t, db, outbox.StatusPublished); got != before {
		t.Errorf("%d published during the outage, want %d", got, before)
	}
	for _, s := range []outbox.Status{outbox.StatusFailed, outbox.StatusDead} {
		if got := countStatus(t, db, s); got != 0 {
			t.Errorf("%d events %s during the outage, want none", got, s)
		}
	}
	var spent int64
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ? AND attempts > 0", string(outbox.StatusPending)).Count(&spent).Error)
	if spent != 0 {
		t.Errorf("%d waiting events spent an attempt on the outage", spent)
	}

	proxy.Restore()
	eventually(t, 30*time.Second, "delivery after the outage", func() bool {
		return countStatus(t, db, outbox.StatusPublished) == before+during
	})
	if n := direct.XLen(t.Context(), stream).Val(); n != before+during {
		t.Errorf("stream holds %d entries, want %d", n, before+during)
	}
	if a := maxAttempts(t, db); a != 1 {
		t.Errorf("max attempts %d, want 1: the outage spent attempts", a)
	}
	if pub.other.Load() != 0 {
		t.Errorf("%d deliveries failed with an error other than Unavailable", pub.other.Load())
	}
}

// TestConsumerRidesOutARedisOutage cuts Redis away from a running consumer:
// Run keeps going, and handles what was added meanwhile once Redis is back.
func TestConsumerRidesOutARedisOutage(t *testing.T) {
	direct := newRedis(t)
	proxy := testenv.NewProxy(t, testenv.RedisAddr(t))
	stream := streamName(t, direct, "outage-consumer")
	seen := newCalls()
	h := outboxredis.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error { seen.add(ctx, e); return nil })
	stop := run(t, outboxredis.NewConsumer(newRedisAt(t, proxy.Addr()), stream, "g", "c", h, consumerOpts(t)...))
	publish(t, direct, stream, envelope("before", "t"))
	eventually(t, 5*time.Second, "the event before the outage", func() bool { n, _ := seen.of("before"); return n == 1 })

	proxy.Cut()
	publish(t, direct, stream, envelope("during", "t"))
	time.Sleep(300 * time.Millisecond)
	if n, _ := seen.of("during"); n != 0 {
		t.Fatalf("handled %d times through a cut connection", n)
	}
	proxy.Restore()
	eventually(t, 15*time.Second, "the event added during the outage", func() bool { n, _ := seen.of("during"); return n == 1 })
	eventually(t, 5*time.Second, "its acknowledgement", func() bool { return pendingCount(t, direct, stream, "g") == 0 })
	stop()
}
