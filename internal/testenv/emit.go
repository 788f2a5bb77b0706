package testenv

import (
	"fmt"
	"slices"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// Emit writes n events built by mk, in transactions of up to 500 events.
func Emit(t testing.TB, db *gorm.DB, n int, mk func(i int) outbox.Event) {
	t.Helper()
	for start := 0; start < n; start += 500 {
		err := db.Transaction(func(tx *gorm.DB) error {
			evs := make([]outbox.Event, 0, 500)
			for i := start; i < min(n, start+500); i++ {
				evs = append(evs, mk(i))
			}
			return outbox.Emit(tx, evs...)
		})
		if err != nil {
			t.Fatalf("emitting events %d…: %v", start, err)
		}
	}
}

// Backlog empties the outbox table and fills it with n pending events
// over keys partition keys (event i has key "key-<i mod keys>"; none when
// keys is 0), then refreshes the statistics (Analyze): the backlog the
// relay's benchmarks drain and claim.
func Backlog(t testing.TB, db *gorm.DB, n, keys int) {
	t.Helper()
	if err := db.Exec("DELETE FROM outbox_events").Error; err != nil {
		t.Fatal(err)
	}
	Emit(t, db, n, func(i int) outbox.Event {
		e := outbox.Event{Type: "bench", AggregateID: fmt.Sprint(i), Payload: map[string]int{"i": i}}
		if keys > 0 {
			e.PartitionKey = fmt.Sprint("key-", i%keys)
		}
		return e
	})
	Analyze(t, db)
}

// Analyze refreshes the planner's statistics of the outbox table, and on
// PostgreSQL first removes the index entries of rows updated and deleted
// before (VACUUM), so that a benchmark does not step over the dead entries
// the previous one left in the same index.
func Analyze(t testing.TB, db *gorm.DB) {
	t.Helper()
	q := "ANALYZE outbox_events"
	switch db.Dialector.Name() {
	case "mysql":
		q = "ANALYZE TABLE outbox_events"
	case "postgres":
		q = "VACUUM ANALYZE outbox_events"
	}
	if err := db.Exec(q).Error; err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// Median is the middle of xs (the mean of the two middle ones when their
// number is even): benchmarks report it rather than a mean, which one
// stall of a small machine would skew.
func Median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	return (s[n/2] + s[(n-1)/2]) / 2
}
