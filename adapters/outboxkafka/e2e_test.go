package outboxkafka_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// TestEndToEnd relays 600 events over 16 partition keys from each
// database through the Publisher (batches of 50, the attempt log on) to a
// topic of 6 partitions: the topic holds every event once, each key's
// events in one partition in commit order, and each event's attempt log
// record has the receipt of its record (topic/partition@offset). Some
// events are then published again, as a relay redelivering them would: an
// idempotent consumer gives every event its effect exactly once.
func TestEndToEnd(t *testing.T) {
	const n, again = 600, 30
	onEach(t, func(t *testing.T, c *cluster, dialect string) {
		db, store := outboxDB(t, dialect)
		topic := c.topic(t, 6, nil)
		emitKeyed(t, db, n, topic)
		pub := newPublisher(t, c.client(t))
		stop := startRelay(t, newRelay(t, db, pub, relay.WithBatchSize(50), relay.WithAttemptLog()))
		eventually(t, 60*time.Second, "every event published", func() bool { return countStatus(t, db, outbox.StatusPublished) == n })
		stop()
		checkPublished(t, db, n)

		recs := c.records(t, topic)
		ds := decode(t, recs)
		if dups := checkAll(t, ds, n); dups != 0 {
			t.Errorf("%d records more than events", dups)
		}
		checkOrder(t, ds)
		insp, err := relay.NewInspector(db)
		must(t, err)
		for i, r := range recs {
			if i%7 != 0 {
				continue
			}
			want := fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset)
			atts, err := insp.Attempts(t.Context(), ds[i].env.ID)
			must(t, err)
			if len(atts) != 1 || atts[0].Outcome != relay.AttemptPublished || atts[0].Receipt != want {
				t.Errorf("event %s: attempt log %+v, want one published record with receipt %s", ds[i].env.ID, atts, want)
			}
		}

		var redeliver []*outbox.Envelope
		for i := 0; i < n; i += n / again {
			redeliver = append(redeliver, ds[i].env)
		}
		for _, err := range pub.PublishBatch(t.Context(), redeliver) {
			must(t, err)
		}
		all := decode(t, c.records(t, topic))
		if dups := checkAll(t, all, n); dups != len(redeliver) {
			t.Errorf("%d redelivered records, want %d", dups, len(redeliver))
		}
		applyOnce(t, db, store, all, n)
	})
}
