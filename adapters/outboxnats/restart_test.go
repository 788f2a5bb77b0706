package outboxnats_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// outagePublisher stops the broker once half the events are published,
// inside the relay's PublishBatch, and counts the events the Publisher
// reported unavailable afterwards.
type outagePublisher struct {
	*outboxnats.Publisher
	stopAt      int64
	published   atomic.Int64
	unavailable atomic.Int64
	stopOnce    sync.Once
	stop        func()
}

func (p *outagePublisher) PublishBatch(ctx context.Context, es []*outbox.Envelope) []error {
	errs := p.Publisher.PublishBatch(ctx, es)
	for _, err := range errs {
		switch {
		case err == nil:
			p.published.Add(1)
		case outbox.IsUnavailable(err):
			p.unavailable.Add(1)
		}
	}
	if p.published.Load() >= p.stopAt {
		p.stopOnce.Do(p.stop)
	}
	return errs
}

// TestBrokerRestart stops a throw-away JetStream server while a relay is
// publishing to it and a consumer is consuming from it, then starts it
// again: the relay spends no event's attempt on the outage, and every event
// is stored once and handled once.
func TestBrokerRestart(t *testing.T) {
	testenv.LongFault(t)
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		const events = 1000
		srv := startServer(t, "-js")
		js, err := jetstream.New(connect(t, srv.URL()))
		must(t, err)
		stream := newStream(t, js)
		_, store := setupDB(t, db)
		must(t, db.AutoMigrate(&effect{}))
		testenv.Emit(t, db, events, func(i int) outbox.Event {
			return outbox.Event{ID: eventID(i), Type: "restart.event", Topic: "r", Payload: map[string]int{"i": i}}
		})
		c, err := outboxnats.NewConsumer(js, stream, "restart", consume.IdempotentTx(store, "consumer",
			func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
				return tx.Create(&effect{EventID: e.ID}).Error
			}), consumerOpts(t, outboxnats.WithBatch(50), outboxnats.WithAckWait(5*time.Second))...) // a message whose ack the restart lost comes back after 5s, not the default 30s
		must(t, err)
		stopConsumer := run(t, c)

		restarted := make(chan struct{})
		pub := &outagePublisher{Publisher: newPublisher(t, js, outboxnats.WithSubjectPrefix(stream+".")), stopAt: events / 2}
		pub.stop = func() {
			srv.stop()
			t.Logf("broker stopped after %d events", pub.published.Load())
			go func() {
				defer close(restarted)
				time.Sleep(1500 * time.Millisecond) // the relay meets the outage meanwhile
				srv.start()
				t.Log("broker started again")
			}()
		}
		r, err := relay.New(db, pub, relay.WithBatchSize(50), relay.WithWorkerID("restart-relay"), relay.WithLogger(testLogger(t)))
		must(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan error, 1)
		go func() { stopped <- r.Start(ctx) }()
		waitFor(t, 120*time.Second, "every event to be published", func() bool {
			return countStatus(t, db, outbox.StatusPublished) == events
		})
		cancel()
		must(t, <-stopped)
		<-restarted
		waitFor(t, 120*time.Second, "every effect", func() bool {
			var n int64
			must(t, db.Model(&effect{}).Count(&n).Error)
			return n >= events
		})
		waitFor(t, 60*time.Second, "the consumer to settle", settled(t, js, stream, "restart"))
		stopConsumer()

		if pub.unavailable.Load() == 0 {
			t.Fatal("the relay never met the outage: nothing was reported unavailable")
		}
		var spent int64
		must(t, db.Model(&outbox.OutboxEvent{}).Where("attempts <> ?", 1).Count(&spent).Error)
		if spent != 0 {
			t.Errorf("%d events spent more than their one attempt on the outage", spent)
		}
		if n := streamMsgs(t, js, stream); n != events {
			t.Errorf("the stream holds %d messages, want %d", n, events)
		}
		checkExactlyOnce(t, db, store, events)
		t.Logf("%d publishes reported unavailable during the outage; no attempt spent, nothing lost", pub.unavailable.Load())
	})
}

// effect is the row a handler writes once per event. event_id is not
// unique on purpose: a second effect would be a second row.
type effect struct {
	ID      uint
	EventID string `gorm:"index"`
}

// checkExactlyOnce checks that every event has one effect row and one
// succeeded idempotency record, and that none is left unpublished.
func checkExactlyOnce(t *testing.T, db *gorm.DB, store *idempotency.Store, n int64) {
	t.Helper()
	var rows, distinct, records int64
	must(t, db.Model(&effect{}).Count(&rows).Error)
	must(t, db.Model(&effect{}).Distinct("event_id").Count(&distinct).Error)
	if rows != n || distinct != n {
		t.Errorf("%d effect rows for %d distinct events, want %d of each", rows, distinct, n)
	}
	must(t, db.Table(store.Table()).Where("idempotency_key LIKE ? AND status = ?", "%:consumer", "succeeded").Count(&records).Error)
	if records != n {
		t.Errorf("%d succeeded consumer records, want %d", records, n)
	}
	for _, s := range []outbox.Status{outbox.StatusFailed, outbox.StatusDead, outbox.StatusPending, outbox.StatusPublishing} {
		if c := countStatus(t, db, s); c != 0 {
			t.Errorf("%d events %s", c, s)
		}
	}
}
