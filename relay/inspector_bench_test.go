package relay_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// BenchmarkInspector measures the admin page's reads on a table of
// history: OUTBOX_BENCH_ROWS rows (default 200,000), 99.8% published, 0.1%
// dead, 0.1% failed heads of keys with a pending event behind each.
//
//	OUTBOX_BENCH_ROWS=1000000 go test -run '^$' -bench BenchmarkInspector -benchtime 20x ./relay
func BenchmarkInspector(b *testing.B) {
	rows := 200000
	if v, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	for _, d := range testenv.Dialects {
		b.Run(fmt.Sprintf("%s/rows=%d", d, rows), func(b *testing.B) {
			db := testenv.Open(b, d)
			must(b, outbox.Migrate(db))
			start := time.Now()
			fillHistory(b, db, d, rows)
			b.Logf("%s: %d rows written in %v", d, rows, time.Since(start).Round(time.Millisecond))
			insp := inspector(b, db)
			ctx := context.Background()
			mid := int64(rows / 2)
			page := func(q relay.EventQuery) func() error {
				return func() error { _, err := insp.ListEvents(ctx, q); return err }
			}
			for _, c := range []struct {
				name string
				run  func() error
			}{
				{"list/newest", page(relay.EventQuery{Newest: true, Filter: relay.Filter{Limit: 50}})},
				{"list/deep-page", page(relay.EventQuery{Newest: true, Filter: relay.Filter{Limit: 50, BeforeID: mid}})},
				{"list/type", page(relay.EventQuery{Newest: true, Filter: relay.Filter{Limit: 50, Type: "type.3"}})},
				{"list/status=dead", page(relay.EventQuery{Newest: true, Status: outbox.StatusDead, Filter: relay.Filter{Limit: 50}})},
				{"list/event-id", page(relay.EventQuery{Newest: true, Filter: relay.Filter{EventID: fmt.Sprintf("h-%d", mid)}})},
				{"list/aggregate", page(relay.EventQuery{Newest: true, Filter: relay.Filter{AggregateType: "order", AggregateID: "77"}})},
				// The admin page's key filter: the key's unfinished and dead
				// events (a key's published ones have no index).
				{"list/key", page(relay.EventQuery{Newest: true, Unfinished: true, Filter: relay.Filter{PartitionKey: "k-7", Limit: 50}})},
				{"count/dead", func() error { _, err := insp.CountEvents(ctx, relay.EventQuery{Status: outbox.StatusDead}); return err }},
				{"blocked-keys", func() error { _, err := insp.BlockedKeys(ctx, 0, 10); return err }},
				{"stats", func() error { _, err := insp.GetStats(ctx); return err }},
				// A refresh (ended minutes remembered), and the first call
				// of an Inspector, which counts the hour's publications.
				{"throughput", func() error { _, err := insp.Throughput(ctx, time.Hour); return err }},
				{"throughput/first", func() error { _, err := inspector(b, db).Throughput(ctx, time.Hour); return err }},
			} {
				b.Run(c.name, func(b *testing.B) {
					for b.Loop() {
						must(b, c.run())
					}
				})
			}
		})
	}
}

// fillHistory writes n rows of history in batches of 1000.
func fillHistory(b *testing.B, db *gorm.DB, d string, n int) {
	now := time.Now().UTC()
	batch := make([]outbox.OutboxEvent, 0, 1000)
	for i := 1; i <= n; i++ {
		e := outbox.OutboxEvent{EventID: fmt.Sprintf("h-%d", i), Type: fmt.Sprintf("type.%d", i%10), Version: 1,
			AggregateType: "order", AggregateID: strconv.Itoa(i % 5000), Topic: "orders", Payload: []byte(`{"n":1}`),
			Status: outbox.StatusPublished, Attempts: 1, AvailableAt: now, CreatedAt: now.Add(-time.Duration(n-i) * time.Millisecond)}
		pub := e.CreatedAt.Add(time.Second)
		e.PublishedAt = &pub
		switch {
		case i%1000 == 0:
			e.Status, e.PublishedAt = outbox.StatusDead, nil
		case i%1000 == 1 && i > 1:
			e.Status, e.PublishedAt, e.PartitionKey = outbox.StatusFailed, nil, fmt.Sprintf("k-%d", i/1000)
			e.AvailableAt = now.Add(time.Hour)
		case i%1000 == 2 && i > 2:
			e.Status, e.PublishedAt, e.PartitionKey = outbox.StatusPending, nil, fmt.Sprintf("k-%d", i/1000)
		}
		batch = append(batch, e)
		if len(batch) == cap(batch) || i == n {
			must(b, db.Session(&gorm.Session{SkipHooks: true}).CreateInBatches(batch, len(batch)).Error)
			batch = batch[:0]
		}
	}
	if d == testenv.Postgres {
		must(b, db.Exec("ANALYZE outbox_events").Error)
	}
}
