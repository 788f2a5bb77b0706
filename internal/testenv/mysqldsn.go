package testenv

import (
	"testing"

	"github.com/go-sql-driver/mysql"
	mysqldriver "gorm.io/driver/mysql"
	"gorm.io/gorm"
)

// OpenMySQL is Open for MySQL/MariaDB with the DSN's settings changed by
// edit, for tests of DSN flags applications use (clientFoundRows, loc,
// parseTime). It skips (or fails) when MySQL is not configured.
func OpenMySQL(t testing.TB, edit func(cfg *mysql.Config)) *gorm.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(DSN(t, MySQL))
	if err != nil {
		t.Fatalf("%s: %v", MySQLEnv, err)
	}
	edit(cfg)
	db, err := gorm.Open(mysqldriver.Open(cfg.FormatDSN()), Config())
	if err != nil {
		t.Fatalf("opening mysql: %v", err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sqlDB.Close() })
	sqlDB.SetMaxIdleConns(16)
	return db
}
