package relay

import (
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// A minute with more publications than the count reads is extrapolated
// from the rate of the first ones, and flagged: 2,000 published evenly in
// a minute, read 500 at most, are about 2,000, estimated. (The real limit
// is 20,000; a test's Inspector lowers it.)
func TestThroughputEstimatesBeyondTheLimit(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
			t.Fatal(err)
		}
		insp, err := NewInspector(db)
		if err != nil {
			t.Fatal(err)
		}
		insp.minutes.cap = 500
		minute := time.Now().UTC().Truncate(time.Minute).Add(-3 * time.Minute)
		for start := 0; start < 2000; start += 500 {
			q := "INSERT INTO outbox_events (event_id, type, version, status, available_at, created_at, published_at) VALUES "
			var args []any
			for i := start; i < start+500; i++ {
				pub := minute.Add(time.Duration(i) * 30 * time.Millisecond)
				if i > start {
					q += ", "
				}
				q += "(?, 't', 1, 'published', ?, ?, ?)"
				args = append(args, fmt.Sprint("e-", i), insp.kind.Time(pub), insp.kind.Time(pub), insp.kind.Time(pub))
			}
			if err := db.Exec(q, args...).Error; err != nil {
				t.Fatal(err)
			}
		}
		minutes, err := insp.Throughput(t.Context(), time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range minutes {
			switch {
			case m.Start.Equal(minute) && (!m.Estimated || m.Published < 1800 || m.Published > 2200):
				t.Errorf("the busy minute: %+v, want about 2,000, estimated", m)
			case !m.Start.Equal(minute) && (m.Published != 0 || m.Estimated):
				t.Errorf("the minute from %v: %+v, want none", m.Start, m)
			}
		}
	})
}
