package relay_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// NewInspector refuses what it cannot inspect, saying why.
func TestNewInspectorRefuses(t *testing.T) {
	if _, err := relay.NewInspector(nil); !errors.Is(err, relay.ErrInvalidOption) {
		t.Errorf("nil db: %v, want ErrInvalidOption", err)
	}
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		if _, err := relay.NewInspector(db); !errors.Is(err, outbox.ErrNotMigrated) {
			t.Errorf("an empty database: %v, want ErrNotMigrated", err)
		}
		must(t, outbox.Migrate(db))
		if _, err := relay.NewInspector(db, relay.InspectTable("x; DROP TABLE y")); !errors.Is(err, relay.ErrInvalidOption) {
			t.Errorf("a table that is not an identifier: %v, want ErrInvalidOption", err)
		}
		i, err := relay.NewInspector(db)
		must(t, err)
		if i.Table() != outbox.DefaultTableName || i.Dialect() == "" {
			t.Errorf("Table %q, Dialect %q", i.Table(), i.Dialect())
		}
	})
}

// ListEvents pages by keyset in both directions, filters by every field,
// and never returns payloads.
func TestListEvents(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		ctx := t.Context()
		emitN(t, db, 30, func(i int) outbox.Event {
			e := event(i)
			e.Topic = []string{"orders", "billing"}[i%2]
			e.TenantID = fmt.Sprintf("tenant-%d", i%3)
			e.AggregateType, e.AggregateID = "order", fmt.Sprint(i%5)
			if i%10 == 0 {
				e.Type, e.PartitionKey = "other.event", "key-a"
			}
			return e
		})
		insp := inspector(t, db)
		for _, newest := range []bool{false, true} {
			var got []string
			q := relay.EventQuery{Filter: relay.Filter{Limit: 7}, Newest: newest}
			for pages := 0; ; pages++ {
				page, err := insp.ListEvents(ctx, q)
				must(t, err)
				for _, e := range page.Events {
					if e.Payload != nil || e.Headers != nil || e.CreatedAt.IsZero() {
						t.Fatalf("a listed event carries payload or lacks times: %+v", e)
					}
					got = append(got, e.EventID)
				}
				if page.Next == 0 {
					break
				}
				if newest {
					q.BeforeID = page.Next
				} else {
					q.AfterID = page.Next
				}
			}
			if len(got) != 30 || (newest && got[0] != "ev-000029") || (!newest && got[0] != "ev-000000") {
				t.Errorf("newest=%v: paged %d events starting %v", newest, len(got), got[:min(len(got), 3)])
			}
		}
		count := func(q relay.EventQuery) int64 {
			n, err := insp.CountEvents(ctx, q)
			must(t, err)
			page, err := insp.ListEvents(ctx, q)
			must(t, err)
			if int64(len(page.Events)) != min(n, 100) {
				t.Errorf("%+v: listed %d, counted %d", q, len(page.Events), n)
			}
			return n
		}
		for name, c := range map[string]struct {
			q    relay.EventQuery
			want int64
		}{
			"type":      {relay.EventQuery{Filter: relay.Filter{Type: "other.event"}}, 3},
			"topic":     {relay.EventQuery{Filter: relay.Filter{Topic: "billing"}}, 15},
			"key":       {relay.EventQuery{Filter: relay.Filter{PartitionKey: "key-a"}}, 3},
			"aggregate": {relay.EventQuery{Filter: relay.Filter{AggregateType: "order", AggregateID: "3"}}, 6},
			"event id":  {relay.EventQuery{Filter: relay.Filter{EventID: "ev-000007"}}, 1},
			"tenant":    {relay.EventQuery{Filter: relay.Filter{TenantID: "tenant-1"}}, 10},
			"status":    {relay.EventQuery{Status: outbox.StatusPending}, 30},
			"dead":      {relay.EventQuery{Status: outbox.StatusDead}, 0},
			"created":   {relay.EventQuery{Filter: relay.Filter{CreatedAfter: time.Now().Add(-time.Hour), CreatedBefore: time.Now().Add(time.Hour)}}, 30},
			"future":    {relay.EventQuery{Filter: relay.Filter{CreatedAfter: time.Now().Add(time.Hour)}}, 0},
		} {
			if n := count(c.q); n != c.want {
				t.Errorf("%s: %d events, want %d", name, n, c.want)
			}
		}
		if _, err := insp.ListEvents(ctx, relay.EventQuery{Status: "lost"}); !errors.Is(err, relay.ErrInvalidOption) {
			t.Errorf("an unknown status: %v, want ErrInvalidOption", err)
		}
	})
}

// A key whose head failed is listed with the events waiting behind it;
// skipping the head lets the key's next events through.
func TestBlockedKeysAndSkip(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		ctx := t.Context()
		emitN(t, db, 5, func(i int) outbox.Event {
			e := event(i)
			e.PartitionKey = []string{"k1", "k1", "k1", "k2", "k2"}[i]
			return e
		})
		failing := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
			if e.ID == "ev-000000" {
				return errFlaky
			}
			return nil
		})
		_, err := newRelay(t, db, failing, relay.WithBackoff(func(int) time.Duration { return time.Hour })).RunOnce(ctx)
		must(t, err)
		insp := inspector(t, db)
		keys, err := insp.BlockedKeys(ctx, 0, 0)
		must(t, err)
		if len(keys) != 1 || keys[0].Head.EventID != "ev-000000" || keys[0].Head.PartitionKey != "k1" || keys[0].Waiting != 2 ||
			keys[0].Head.LastError == nil || keys[0].Head.Payload != nil {
			t.Fatalf("blocked keys: %+v", keys)
		}
		if more, err := insp.BlockedKeys(ctx, keys[0].Head.ID, 10); err != nil || len(more) != 0 {
			t.Errorf("the page after the last: %v, %v", more, err)
		}
		if _, err := insp.SkipKeyHead(ctx, "k2"); !errors.Is(err, relay.ErrKeyNotBlocked) {
			t.Errorf("skipping a delivered key: %v, want ErrKeyNotBlocked", err)
		}
		id, err := insp.SkipKeyHead(ctx, "k1")
		must(t, err)
		if row := statusOf(t, db, "ev-000000"); id != "ev-000000" || row.Status != outbox.StatusDead || row.LastError == nil {
			t.Errorf("skipped %q: %+v", id, row)
		}
		res, err := newRelay(t, db, newRecorder()).RunOnce(ctx)
		must(t, err)
		if res.Published != 2 {
			t.Errorf("after the skip: %+v, want k1's 2 other events published", res)
		}
		if keys, _ := insp.BlockedKeys(ctx, 0, 0); len(keys) != 0 {
			t.Errorf("still blocked: %+v", keys)
		}
	})
}

// Throughput counts this minute's publications, one entry per minute.
func TestThroughput(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		emitN(t, db, 12, event)
		_, err := newRelay(t, db, newRecorder()).RunOnce(t.Context())
		must(t, err)
		minutes, err := inspector(t, db).Throughput(t.Context(), time.Hour)
		must(t, err)
		if len(minutes) != 60 || minutes[59].MinutesAgo != 0 || minutes[0].MinutesAgo != 59 {
			t.Fatalf("%d minutes: %+v", len(minutes), minutes)
		}
		var total int64
		for _, m := range minutes {
			total += m.Published
		}
		if total != 12 || minutes[59].Published+minutes[58].Published != 12 || minutes[59].AvgLag < 0 {
			t.Errorf("throughput: %d in total, last minutes %+v %+v", total, minutes[58], minutes[59])
		}
	})
}
