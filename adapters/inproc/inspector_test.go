package inproc_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/relay"
)

// mustInspector returns an Inspector of db's outbox table.
func mustInspector(t testing.TB, db *gorm.DB) *relay.Inspector {
	t.Helper()
	i, err := relay.NewInspector(db)
	must(t, err)
	return i
}
