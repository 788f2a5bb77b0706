package relay_test

import (
	"fmt"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/relay"
)

// publishBurst writes n published events, published evenly between from
// and to, each created lag before its publication.
func publishBurst(t *testing.T, db *gorm.DB, prefix string, n int, from, to time.Time, lag time.Duration) {
	t.Helper()
	kind, err := dialect.Of(db)
	must(t, err)
	step := to.Sub(from) / time.Duration(n)
	for start := 0; start < n; start += 500 {
		q := "INSERT INTO outbox_events (event_id, type, version, status, available_at, created_at, published_at) VALUES "
		var args []any
		for i := start; i < min(start+500, n); i++ {
			pub := from.Add(time.Duration(i) * step)
			if i > start {
				q += ", "
			}
			q += "(?, 't', 1, 'published', ?, ?, ?)"
			args = append(args, fmt.Sprintf("%s-%d", prefix, i), kind.Time(pub), kind.Time(pub.Add(-lag)), kind.Time(pub))
		}
		must(t, db.Exec(q, args...).Error)
	}
}

// A burst of 9,500 publications in 5 seconds after 500 in 40 quiet ones,
// 10,000 in one minute, reads as 10,000 (within 10%): the chart
// extrapolated each minute from its first 500 events (here, from the
// quiet start: a tenth of the burst).
func TestThroughputCountsABurst(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		minute := time.Now().UTC().Truncate(time.Minute).Add(-5 * time.Minute)
		publishBurst(t, db, "quiet", 500, minute, minute.Add(40*time.Second), time.Second)
		publishBurst(t, db, "burst", 9500, minute.Add(40*time.Second), minute.Add(45*time.Second), 2*time.Second)
		minutes, err := inspector(t, db).Throughput(t.Context(), time.Hour)
		must(t, err)
		var total int64
		for _, m := range minutes {
			total += m.Published
		}
		if total < 9000 || total > 11000 {
			t.Errorf("the hour's throughput adds up to %d, want 10,000 within 10%%: %+v", total, nonZero(minutes))
		}
		for _, m := range minutes {
			want := int64(0)
			if m.Start.Equal(minute) {
				want = 10000
			}
			if m.Published != want || m.Estimated {
				t.Errorf("the minute from %v: %+v, want %d exactly", m.Start, m, want)
			}
		}
	})
}

// An ended minute is counted once: the next call reads only the current
// minute (events published later into an ended minute, which no relay
// does, are not seen), and a new Inspector counts again.
func TestThroughputRemembersEndedMinutes(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		now := time.Now().UTC().Truncate(time.Minute)
		old := now.Add(-10 * time.Minute)
		publishBurst(t, db, "a", 100, old, old.Add(30*time.Second), time.Second)
		insp := inspector(t, db)
		first, err := insp.Throughput(t.Context(), time.Hour)
		must(t, err)
		publishBurst(t, db, "b", 50, old.Add(40*time.Second), old.Add(50*time.Second), time.Second)
		second, err := insp.Throughput(t.Context(), time.Hour)
		must(t, err)
		fresh, err := inspector(t, db).Throughput(t.Context(), time.Hour)
		must(t, err)
		at := func(ms []relay.MinuteStat) int64 {
			for _, m := range ms {
				if m.Start.Equal(old) {
					return m.Published
				}
			}
			t.Fatalf("no minute starts at %v", old)
			return 0
		}
		if a, b, c := at(first), at(second), at(fresh); a != 100 || b != 100 || c != 150 {
			t.Errorf("ten minutes ago: %d, then %d (remembered), then %d by a new Inspector; want 100, 100, 150", a, b, c)
		}
	})
}

func nonZero(minutes []relay.MinuteStat) []relay.MinuteStat {
	var out []relay.MinuteStat
	for _, m := range minutes {
		if m.Published != 0 {
			out = append(out, m)
		}
	}
	return out
}
