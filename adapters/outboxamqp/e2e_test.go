package outboxamqp_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxamqp"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// effect is the row a handler writes once per event. event_id is not
// unique on purpose: a second effect would be a second row.
type effect struct {
	ID      uint
	EventID string `gorm:"index"`
}

// counter counts calls per event id.
type counter struct{ m sync.Map }

func (c *counter) inc(id string) int32 {
	v, _ := c.m.LoadOrStore(id, new(atomic.Int32))
	return v.(*atomic.Int32).Add(1)
}

func (c *counter) get(id string) int32 {
	if v, ok := c.m.Load(id); ok {
		return v.(*atomic.Int32).Load()
	}
	return 0
}

// effectConsumer returns a consumer of q whose handler writes one effect
// row per event with IdempotentTx; deliveries counts the messages it was
// given, runs the runs of the effect's function (not skipped).
func effectConsumer(t testing.TB, conn *amqp.Connection, q string, store *idempotency.Store, deliveries, runs *counter, opts ...outboxamqp.ConsumerOption) *outboxamqp.Consumer {
	t.Helper()
	write := outboxamqp.IdempotentTx(store, "effects", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		runs.inc(e.ID)
		return tx.Create(&effect{EventID: e.ID}).Error
	})
	h := outboxamqp.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		deliveries.inc(e.ID)
		return write.Handle(ctx, e)
	})
	return newConsumer(t, conn, q, h, append([]outboxamqp.ConsumerOption{outboxamqp.WithConcurrency(4)}, opts...)...)
}

// checkOnce checks that each of the n events has exactly one effect row and
// that the outbox holds nothing but published events.
func checkOnce(t testing.TB, db *gorm.DB, n int) {
	t.Helper()
	var rows []struct {
		EventID string
		N       int
	}
	must(t, db.Model(&effect{}).Select("event_id, COUNT(*) AS n").Group("event_id").Scan(&rows).Error)
	if len(rows) != n {
		t.Errorf("%d events have an effect, want %d", len(rows), n)
	}
	bad := 0
	for _, r := range rows {
		if r.N != 1 {
			if bad++; bad <= 10 {
				t.Errorf("event %s took effect %d times", r.EventID, r.N)
			}
		}
	}
	for _, s := range []outbox.Status{outbox.StatusPending, outbox.StatusPublishing, outbox.StatusFailed, outbox.StatusDead} {
		if c := countStatus(t, db, s); c != 0 {
			t.Errorf("%d events %s", c, s)
		}
	}
}

func effects(t testing.TB, db *gorm.DB) int64 {
	t.Helper()
	var n int64
	must(t, db.Model(&effect{}).Count(&n).Error)
	return n
}

// TestEndToEnd relays events from each database to RabbitMQ, where a
// consumer (four workers) writes one effect per event with IdempotentTx;
// some events are published twice more, as a relay redelivering them
// would: every event takes effect exactly once.
func TestEndToEnd(t *testing.T) {
	const n, dups = 600, 40
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		_, store := setupDB(t, db)
		must(t, db.AutoMigrate(&effect{}))
		q := queue(t, "e2e", nil)
		emitN(t, db, n, q)
		pub := newPublisher(t, dial(t))
		stopRelay := startRelay(t, newRelay(t, db, pub, relay.WithBatchSize(50)))

		var deliveries, runs counter
		stop := runConsumer(t, effectConsumer(t, dial(t), q, store, &deliveries, &runs))
		eventually(t, 60*time.Second, "every event published", func() bool { return countStatus(t, db, outbox.StatusPublished) == n })
		stopRelay()

		var again []*outbox.Envelope
		for i := 0; i < n; i += n / dups {
			again = append(again, &outbox.Envelope{ID: eventID(i), Type: "order.created", Topic: q, Attempt: 2,
				Payload: []byte(fmt.Sprintf(`{"i":%d}`, i))})
		}
		for _, err := range pub.PublishBatch(t.Context(), again) {
			must(t, err)
		}
		eventually(t, 60*time.Second, "every message handled", func() bool {
			return effects(t, db) >= n && depth(t, q) == 0 && deliveries.count() >= n+len(again)
		})
		stop()
		checkOnce(t, db, n)
		for _, e := range again {
			if d, r := deliveries.get(e.ID), runs.get(e.ID); d != 2 || r != 1 {
				t.Errorf("%s: %d deliveries, %d effect runs; want 2 and 1", e.ID, d, r)
			}
		}
	})
}

func (c *counter) count() (n int) {
	c.m.Range(func(_, v any) bool { n += int(v.(*atomic.Int32).Load()); return true })
	return n
}
