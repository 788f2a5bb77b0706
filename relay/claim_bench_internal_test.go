package relay

import (
	"context"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// BenchmarkClaim times one claim of 1,000 events on its own, per dialect:
// from a backlog of 8,000 events without a key, and from one of 8,000
// events over 1,000 keys (event i has key i mod 1,000) taken as 125 runs
// of 8, as a relay that has learned their depth claims them. Each
// iteration refills the table and times one claim of each, and the
// benchmark reports the median times and the median of the per-iteration
// ratios unkeyed/keyed. A drain of a backlog is bound by its claims (the
// relay delivers and completes a batch while it claims the next), so this
// ratio bounds BenchmarkKeyedBacklog's 1000keys/unkeyed.
//
//	go test -run '^$' -bench BenchmarkClaim -benchtime 20x ./relay
func BenchmarkClaim(b *testing.B) {
	for _, d := range testenv.Dialects {
		b.Run(d, func(b *testing.B) {
			db := testenv.Open(b, d)
			if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
				b.Fatal(err)
			}
			kind, err := dialect.Of(db)
			if err != nil {
				b.Fatal(err)
			}
			drv := newDriver(kind, "outbox_events", false)
			var unkeyed, keyed, ratio []float64
			for b.Loop() {
				u := timeClaim(b, db, drv, 0)
				k := timeClaim(b, db, drv, 1000)
				unkeyed, keyed, ratio = append(unkeyed, u), append(keyed, k), append(ratio, u/k)
			}
			b.ReportMetric(testenv.Median(unkeyed), "unkeyed-µs/claim")
			b.ReportMetric(testenv.Median(keyed), "keyed-µs/claim")
			b.ReportMetric(testenv.Median(ratio), "unkeyed/keyed")
		})
	}
}

// timeClaim fills the table with 8,000 pending events over keys partition
// keys (none when keys is 0) and returns how many microseconds one claim
// of 1,000 of them takes, each key's run at most 8 long.
func timeClaim(b *testing.B, db *gorm.DB, drv driver, keys int) float64 {
	b.Helper()
	const events, limit = 8000, 1000
	testenv.Backlog(b, db, events, keys)
	heads := limit
	if keys > 0 {
		heads = limit / (events / keys)
	}
	ctx := context.Background()
	// A first claim of one event warms the connection and the plan cache.
	if _, err := drv.claim(ctx, db, "warm-up", 1, 1, time.Minute); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	rows, err := drv.claim(ctx, db, "bench", limit, heads, time.Minute)
	took := time.Since(start)
	if err != nil {
		b.Fatal(err)
	}
	if len(rows) != limit {
		b.Fatalf("claimed %d events, want %d", len(rows), limit)
	}
	return float64(took.Microseconds())
}
