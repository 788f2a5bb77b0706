package postgres_test

import (
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver/drivertest"
	"github.com/gormoutbox/outbox/internal/sqldriver/postgres"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func TestConformance(t *testing.T) {
	drivertest.Exercise(t, postgres.Driver{}, func(t *testing.T) *gorm.DB { return testenv.Open(t, testenv.Postgres) })
}
