package outboxamqp_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// countingPublisher counts the outcomes of a BatchPublisher.
type countingPublisher struct {
	*outboxamqp.Publisher
	unavailable, other atomic.Int64
}

func (p *countingPublisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := p.Publisher.PublishBatch(ctx, es)
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

// TestBrokerOutageSpendsNoAttempts takes RabbitMQ away from a running relay
// and consumer (a TCP proxy in front of the broker cuts every connection and
// refuses new ones): the relay's deliveries are released without spending
// attempts (an event may try twice at most, yet none fails or dies), nothing
// is lost, and once the broker is back both dial again, the relay publishes
// every event and the consumer gives each its effect exactly once.
func TestBrokerOutageSpendsNoAttempts(t *testing.T) {
	const before, during = 20, 60
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		_, store := setupDB(t, db)
		must(t, db.AutoMigrate(&effect{}))
		q := queue(t, "outage", nil)
		proxy := testenv.NewProxy(t, brokerAddr(t))
		dialer := outboxamqp.WithDial(outboxamqp.Dialer(viaProxy(t, proxy), amqp.Config{}))

		pub := &countingPublisher{Publisher: newPublisher(t, nil, dialer)}
		startRelay(t, newRelay(t, db, pub, relay.WithBatchSize(25), relay.WithMaxAttempts(2)))
		var deliveries, runs counter
		stopConsumer := runConsumer(t, effectConsumer(t, nil, q, store, &deliveries, &runs, dialer))
		emit := func(from, n int) {
			testenv.Emit(t, db, n, func(i int) outbox.Event {
				return outbox.Event{ID: eventID(from + i), Type: "t", Topic: q, Payload: map[string]int{"i": from + i}}
			})
		}
		emit(0, before)
		eventually(t, 20*time.Second, "the first events handled", func() bool { return effects(t, db) == before })

		proxy.Cut()
		emit(before, during)
		eventually(t, 20*time.Second, "two unavailable rounds", func() bool { return pub.unavailable.Load() >= 2*25 })
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
		eventually(t, 90*time.Second, "every event handled after the outage", func() bool {
			return countStatus(t, db, outbox.StatusPublished) == before+during && effects(t, db) >= before+during && depth(t, q) == 0
		})
		stopConsumer()
		checkOnce(t, db, before+during)
		var most int
		must(t, db.Model(&outbox.OutboxEvent{}).Select("COALESCE(MAX(attempts), 0)").Scan(&most).Error)
		if most != 1 {
			t.Errorf("max attempts %d, want 1: the outage spent attempts", most)
		}
		if n := pub.other.Load(); n != 0 {
			t.Errorf("%d deliveries failed with an error other than Unavailable", n)
		}
	})
}
