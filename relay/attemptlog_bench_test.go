package relay_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// BenchmarkAttemptLog measures the cost of WithAttemptLog: one relay
// drains a backlog of 5,000 pending events to published with a no-op
// publisher, without the attempt log and with it, in each iteration (which
// goes first alternates), so that the ratio compares like with like (small,
// for a shared machine):
//
//	go test -run '^$' -bench BenchmarkAttemptLog -benchtime 4x ./relay
func BenchmarkAttemptLog(b *testing.B) {
	const events, batch = 5000, 100
	for _, d := range testenv.Dialects {
		b.Run(d, func(b *testing.B) {
			db := testenv.Open(b, d)
			if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
				b.Fatal(err)
			}
			var off, on float64
			for i := 0; b.Loop(); i++ {
				// Alternate which drain runs first: the second finds the
				// table the first left behind.
				for k := range 2 {
					fill(b, db, events)
					if (i+k)%2 == 0 {
						off += drainWith(b, db, batch, events)
					} else {
						on += drainWith(b, db, batch, events, relay.WithAttemptLog())
					}
				}
				var logged int64
				if err := db.Table("outbox_events_attempts").Count(&logged).Error; err != nil || logged != events {
					b.Fatalf("%d records (%v), want %d", logged, err, events)
				}
				if err := db.Exec("DELETE FROM outbox_events_attempts").Error; err != nil {
					b.Fatal(err)
				}
			}
			off /= float64(b.N)
			on /= float64(b.N)
			b.ReportMetric(off, "off-events/s")
			b.ReportMetric(on, "on-events/s")
			b.ReportMetric(on/off, "on/off")
		})
	}
}

// drainWith drains n events with one relay given opts, and returns the
// rate.
func drainWith(b *testing.B, db *gorm.DB, batch, n int, opts ...relay.Option) float64 {
	var done atomic.Int64
	pub := relay.PublisherFunc(func(context.Context, *outbox.Envelope) error { done.Add(1); return nil })
	start := time.Now()
	runRelays(b, db, 1, pub, 5*time.Minute, func() bool { return done.Load() >= int64(n) },
		append([]relay.Option{relay.WithBatchSize(batch), relay.WithRetention(0)}, opts...)...)
	return float64(n) / time.Since(start).Seconds()
}
