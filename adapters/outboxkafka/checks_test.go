package outboxkafka_test

// The end-to-end checks: what a topic holds after a relay ran, read back
// as events, whatever the broker.

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/idempotency"
)

// effect is the row a consumer's handler writes once per event. event_id
// is not unique on purpose: a second effect would be a second row.
type effect struct {
	ID      uint
	EventID string `gorm:"index"`
}

// delivered is a record read back as the event it carries.
type delivered struct {
	env       *outbox.Envelope
	key       string
	partition int32
	seq       int // the payload's "i"
}

// decode reads structured-layout records back as events, in their order.
func decode(t testing.TB, recs []*kgo.Record) []delivered {
	t.Helper()
	out := make([]delivered, len(recs))
	for n, r := range recs {
		e, err := outbox.DecodeEnvelope(r.Value)
		if err != nil {
			t.Fatalf("record %s/%d@%d: %v", r.Topic, r.Partition, r.Offset, err)
		}
		var p struct{ I int }
		must(t, json.Unmarshal(e.Payload, &p))
		out[n] = delivered{env: e, key: string(r.Key), partition: r.Partition, seq: p.I}
	}
	return out
}

// checkOrder checks per-key order where no relay crashed: all records of
// a key are in one partition, and within it the key's events never go
// back (a redelivered event may follow itself, never a later event of its
// key).
func checkOrder(t testing.TB, ds []delivered) { t.Helper(); checkKeys(t, ds, false) }

// checkFirstOrder checks per-key order as a consumer that drops
// duplicates by event id sees it: all records of a key are in one
// partition, and each event first comes after the first record of every
// earlier event of its key. A relay that crashed after producing a key's
// events and before recording them makes its successor produce them
// again, from the first unrecorded one: the key's records then go back.
func checkFirstOrder(t testing.TB, ds []delivered) { t.Helper(); checkKeys(t, ds, true) }

func checkKeys(t testing.TB, ds []delivered, firstOnly bool) {
	t.Helper()
	part, last := map[string]int32{}, map[string]int{}
	seen := map[string]bool{}
	bad := 0
	for _, d := range ds {
		if d.key == "" {
			continue
		}
		if p, ok := part[d.key]; ok && p != d.partition {
			t.Fatalf("key %s in partitions %d and %d", d.key, p, d.partition)
		}
		part[d.key] = d.partition
		if firstOnly && seen[d.env.ID] {
			continue
		}
		seen[d.env.ID] = true
		if l, ok := last[d.key]; ok && d.seq < l {
			if bad++; bad <= 10 {
				t.Errorf("key %s: event %d after event %d", d.key, d.seq, l)
			}
		}
		last[d.key] = max(last[d.key], d.seq)
	}
}

// checkAll checks that events 0 to n-1, and no other, are all there, and
// returns how many records were redeliveries.
func checkAll(t testing.TB, ds []delivered, n int) (dups int) {
	t.Helper()
	seen := map[string]int{}
	for _, d := range ds {
		seen[d.env.ID]++
	}
	for i := range n {
		if seen[eventID(i)] == 0 {
			t.Errorf("event %s is missing", eventID(i))
		}
		delete(seen, eventID(i))
	}
	if len(seen) > 0 {
		t.Errorf("%d unexpected events: %v", len(seen), seen)
	}
	return len(ds) - n
}

// applyOnce hands every record's event, in order, to a handler that
// writes one effect row per event with idempotency.Store.DoTx, as an
// idempotent consumer would, and checks that each of the n events took
// effect exactly once.
func applyOnce(t testing.TB, db *gorm.DB, store *idempotency.Store, ds []delivered, n int) {
	t.Helper()
	for _, d := range ds {
		must(t, store.DoTx(context.Background(), idempotency.HandlerKey(d.env.ID, "effects"), func(tx *gorm.DB) error {
			return tx.Create(&effect{EventID: d.env.ID}).Error
		}))
	}
	var rows []struct {
		EventID string
		N       int
	}
	must(t, db.Model(&effect{}).Select("event_id, COUNT(*) AS n").Group("event_id").Scan(&rows).Error)
	if len(rows) != n {
		t.Errorf("%d events took effect, want %d", len(rows), n)
	}
	for _, r := range rows {
		if r.N != 1 {
			t.Errorf("event %s took effect %d times", r.EventID, r.N)
		}
	}
}

// checkPublished checks that the outbox holds n published events and
// nothing else.
func checkPublished(t testing.TB, db *gorm.DB, n int) {
	t.Helper()
	if got := countStatus(t, db, outbox.StatusPublished); got != int64(n) {
		t.Errorf("%d events published, want %d", got, n)
	}
	for _, s := range []outbox.Status{outbox.StatusPending, outbox.StatusPublishing, outbox.StatusFailed, outbox.StatusDead} {
		if c := countStatus(t, db, s); c != 0 {
			t.Errorf("%d events %s", c, s)
		}
	}
}
