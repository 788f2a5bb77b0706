package testenv

import (
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
