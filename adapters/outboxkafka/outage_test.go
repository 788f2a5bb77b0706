package outboxkafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxkafka"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// TestBrokerOutageSpendsNoAttempts cuts the relay's client off every
// broker (its connections closed, new ones refused) while events keep
// coming: the deliveries are Unavailable, the relay releases them without
// spending attempts, nothing fails or dies; once the network is back,
// every event is published (some twice: the client sends what it had in
// flight when the wait ended, at least once), in per-key order, and an
// idempotent consumer gives each one effect.
func TestBrokerOutageSpendsNoAttempts(t *testing.T) {
	testenv.LongFault(t)
	const before, during = 40, 160
	onEach(t, func(t *testing.T, c *cluster, dialect string) {
		db, store := outboxDB(t, dialect)
		topic := c.topic(t, 6, nil)
		var net network
		cl := c.client(t, kgo.Dialer(net.dial), kgo.RequestTimeoutOverhead(time.Second))
		pub := &outcomes{Publisher: newPublisher(t, cl, outboxkafka.WithAckTimeout(500*time.Millisecond))}
		stop := startRelay(t, newRelay(t, db, pub, relay.WithBatchSize(25), relay.WithMaxAttempts(2)))
		emitKeyed(t, db, before, topic)
		eventually(t, 30*time.Second, "the first events published", func() bool { return countStatus(t, db, outbox.StatusPublished) == before })

		net.Cut()
		emitKeyedFrom(t, db, before, during, topic)
		eventually(t, 30*time.Second, "unavailable deliveries", func() bool { return pub.unavailable.Load() >= 2 })
		if got := countStatus(t, db, outbox.StatusPublished); got != before {
			t.Errorf("%d published during the outage, want %d", got, before)
		}
		for _, s := range []outbox.Status{outbox.StatusFailed, outbox.StatusDead} {
			if got := countStatus(t, db, s); got != 0 {
				t.Errorf("%d events %s during the outage, want none", got, s)
			}
		}

		net.Restore()
		eventually(t, 60*time.Second, "every event published after the outage", func() bool {
			return countStatus(t, db, outbox.StatusPublished) == before+during
		})
		stop()
		checkPublished(t, db, before+during)
		if most := attemptsSpent(t, db); most != 1 {
			t.Errorf("max attempts %d, want 1: the outage spent attempts", most)
		}
		if n := pub.other.Load() + pub.tooLarge.Load(); n != 0 {
			t.Errorf("%d deliveries failed with an error other than Unavailable", n)
		}
		ds := decode(t, c.records(t, topic))
		t.Logf("%d unavailable deliveries, %d records more than events", pub.unavailable.Load(), checkAll(t, ds, before+during))
		checkOrder(t, ds)
		applyOnce(t, db, store, ds, before+during)
	})
}
