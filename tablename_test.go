package outbox_test

import (
	"errors"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// OutboxEvent.TableName is DefaultTableName; on a db whose Plugin has
// another table, a statement on OutboxEvent that names no table fails
// clearly rather than read or write the default table.
func TestOutboxEventTableFollowsThePluginOrFails(t *testing.T) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		p := &outbox.Plugin{TableName: "app_outbox", AutoMigrate: true}
		must(t, db.Use(p))
		must(t, db.AutoMigrate(&Order{}))
		must(t, db.Create(&Order{Customer: "c"}).Error)

		var n int64
		err := db.Model(&outbox.OutboxEvent{}).Count(&n).Error
		if !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("Count on OutboxEvent: %v, want ErrInvalidConfig", err)
		}
		var rows []outbox.OutboxEvent
		if err := db.Find(&rows).Error; !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("Find: %v, want ErrInvalidConfig", err)
		}
		if err := db.Model(&outbox.OutboxEvent{}).Where("id > 0").Update("topic", "x").Error; !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("Update: %v, want ErrInvalidConfig", err)
		}
		if err := db.Where("id > 0").Delete(&outbox.OutboxEvent{}).Error; !errors.Is(err, outbox.ErrInvalidConfig) {
			t.Errorf("Delete: %v, want ErrInvalidConfig", err)
		}

		// Naming the table works.
		must(t, db.Table(p.Table()).Model(&outbox.OutboxEvent{}).Count(&n).Error)
		must(t, db.Table(p.Table()).Order("id").Find(&rows).Error)
		if n != 1 || len(rows) != 1 {
			t.Errorf("db.Table(%q): %d counted, %d found, want 1", p.Table(), n, len(rows))
		}
		// Raw SQL names its table itself.
		must(t, db.Raw("SELECT * FROM app_outbox").Scan(&rows).Error)
	})
}

// With the default table, OutboxEvent needs no db.Table.
func TestOutboxEventDefaultTable(t *testing.T) {
	db := openSQLite(t)
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	var n int64
	must(t, db.Model(&outbox.OutboxEvent{}).Count(&n).Error)
}
