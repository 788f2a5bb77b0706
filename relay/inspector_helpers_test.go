package relay_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/relay"
)

// inspector returns an Inspector of db's outbox table, failing the test
// if it cannot be made.
func inspector(t testing.TB, db *gorm.DB) *relay.Inspector {
	t.Helper()
	i, err := relay.NewInspector(db)
	if err != nil {
		t.Fatal(err)
	}
	return i
}
