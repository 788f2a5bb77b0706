package outboxredis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// emitN writes n events of topic in transactions of up to 500.
func emitN(t testing.TB, db *gorm.DB, n int, topic string) {
	t.Helper()
	testenv.Emit(t, db, n, func(i int) outbox.Event {
		return outbox.Event{
			ID: fmt.Sprintf("ev-%06d", i), Type: "order.created", Topic: topic,
			AggregateType: "order", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i},
		}
	})
}

func countStatus(t testing.TB, db *gorm.DB, s outbox.Status) int64 {
	t.Helper()
	var n int64
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", string(s)).Count(&n).Error)
	return n
}

// TestRelayToStreamToTwoConsumersEffectsOnce relays events from PostgreSQL
// into a stream read by a group of two consumers, after a third consumer
// took messages and died without acknowledging them, and with duplicate
// entries: every event's effect happens exactly once.
func TestRelayToStreamToTwoConsumersEffectsOnce(t *testing.T) {
	const n, crashed, dups = 300, 40, 30
	rdb := newRedis(t)
	db, store := outboxDB(t, testenv.Postgres)
	must(t, db.Exec("CREATE TABLE effects (event_id VARCHAR(128) NOT NULL, consumer VARCHAR(64) NOT NULL)").Error)
	topic := streamName(t, rdb, "e2e-orders")
	ctx := t.Context()
	must(t, rdb.XGroupCreateMkStream(ctx, topic, "workers", "0").Err())

	// Relay: PostgreSQL → stream.
	emitN(t, db, n, topic)
	pub := outboxredis.NewStreamPublisher(rdb, outboxredis.WithLogger(testLogger(t)))
	stopRelay := startRelay(t, newRelay(t, db, pub, relay.WithBatchSize(50)))
	eventually(t, 20*time.Second, "every event relayed", func() bool { return countStatus(t, db, outbox.StatusPublished) == n })
	stopRelay()
	if l := rdb.XLen(ctx, topic).Val(); l != n {
		t.Fatalf("stream holds %d entries, want %d", l, n)
	}

	// A consumer takes messages and dies before acknowledging them.
	taken, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: "workers", Consumer: "crashed", Streams: []string{topic, ">"}, Count: crashed, Block: -1,
	}).Result()
	must(t, err)
	crashedIDs := map[string]bool{}
	for _, m := range taken[0].Messages {
		crashedIDs[m.ID] = true
	}
	if len(crashedIDs) != crashed {
		t.Fatalf("the crashed consumer took %d messages, want %d", len(crashedIDs), crashed)
	}

	// Duplicate entries: a relay redelivering after a crash appends again.
	var again []*outbox.Envelope
	for i := 0; i < n; i += n / dups {
		var row outbox.OutboxEvent
		must(t, db.Where("event_id = ?", fmt.Sprintf("ev-%06d", i)).First(&row).Error)
		again = append(again, &outbox.Envelope{ID: row.EventID, Type: row.Type, Topic: row.Topic,
			AggregateType: row.AggregateType, AggregateID: row.AggregateID, Payload: row.Payload, Attempt: 2, CreatedAt: row.CreatedAt})
	}
	for _, err := range pub.PublishBatch(ctx, again) {
		must(t, err)
	}

	var (
		mu        sync.Mutex
		calls     int
		reclaimed = map[string]bool{} // crashed consumer's entries handled again
	)
	effect := outboxredis.IdempotentTx(store, "effects", func(ctx context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		d, _ := outboxredis.DeliveryFrom(ctx)
		return tx.Exec("INSERT INTO effects (event_id, consumer) VALUES (?, ?)", e.ID, d.Consumer).Error
	})
	h := outboxredis.HandlerFunc(func(ctx context.Context, e *outbox.Envelope) error {
		d, _ := outboxredis.DeliveryFrom(ctx)
		mu.Lock()
		calls++
		if crashedIDs[d.EntryID] && d.Deliveries >= 2 {
			reclaimed[d.EntryID] = true
		}
		mu.Unlock()
		return effect.Handle(ctx, e)
	})
	for _, name := range []string{"worker-1", "worker-2"} {
		run(t, outboxredis.NewConsumer(rdb, topic, "workers", name, h, consumerOpts(t, outboxredis.WithCount(20))...))
	}
	eventually(t, 30*time.Second, "every entry handled and acknowledged", func() bool {
		var effects int64
		must(t, db.Table("effects").Count(&effects).Error)
		return effects >= n && pendingCount(t, rdb, topic, "workers") == 0
	})

	var rows []struct {
		EventID string
		N       int
	}
	must(t, db.Raw("SELECT event_id, COUNT(*) AS n FROM effects GROUP BY event_id").Scan(&rows).Error)
	if len(rows) != n {
		t.Errorf("%d events have an effect, want %d", len(rows), n)
	}
	for _, r := range rows {
		if r.N != 1 {
			t.Errorf("event %s took effect %d times", r.EventID, r.N)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reclaimed) != crashed {
		t.Errorf("%d of the crashed consumer's %d messages were claimed and handled again", len(reclaimed), crashed)
	}
	if calls < n+len(again) {
		t.Errorf("handler called %d times, want at least %d (every entry, duplicates included)", calls, n+len(again))
	}
	consumers, err := rdb.XInfoConsumers(ctx, topic, "workers").Result()
	must(t, err)
	for _, c := range consumers {
		if c.Pending != 0 {
			t.Errorf("consumer %s still has %d pending", c.Name, c.Pending)
		}
	}
}
