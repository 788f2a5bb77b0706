package mysql_test

import (
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox/internal/sqldriver/drivertest"
	"github.com/gormoutbox/outbox/internal/sqldriver/mysql"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func TestConformance(t *testing.T) {
	drivertest.Exercise(t, mysql.Driver{}, func(t *testing.T) *gorm.DB { return testenv.Open(t, testenv.MySQL) })
}

// The DSN flags applications use change what the driver sees: with
// clientFoundRows=true a skipped duplicate counts one row, and with a loc
// other than UTC DATETIME values are read in that zone. The suite passes
// with them too.
func TestConformanceDSNFlags(t *testing.T) {
	east, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Skipf("no zone database: %v", err)
	}
	drivertest.Exercise(t, mysql.Driver{}, func(t *testing.T) *gorm.DB {
		return testenv.OpenMySQL(t, func(c *gomysql.Config) { c.ClientFoundRows = true; c.Loc = east })
	})
}
