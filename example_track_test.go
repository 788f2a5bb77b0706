package outbox_test

import (
	"encoding/json"
	"fmt"
	"log"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// Shop order, tracked: no hook methods.
type ShopOrder struct {
	ID        uint
	Customer  string
	Status    string
	DeletedAt gorm.DeletedAt
}

// One line of setup turns every write of a model into an event, in the
// write's transaction.
func ExampleTrack() {
	db := exampleDB()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&ShopOrder{}); err != nil {
		log.Fatal(err)
	}
	if err := outbox.Track(db, &ShopOrder{}); err != nil {
		log.Fatal(err)
	}

	o := ShopOrder{Customer: "ada", Status: "new"}
	db.Create(&o)                         // shop_order.created
	db.Model(&o).Update("status", "paid") // shop_order.updated
	// A bulk update: one event per row it changed, with old and new values.
	db.Model(&ShopOrder{}).Where("status = ?", "paid").Update("status", "shipped")
	db.Delete(&o) // shop_order.deleted (soft)

	var events []outbox.OutboxEvent
	db.Order("id").Find(&events)
	for _, e := range events {
		var c outbox.Change
		_ = json.Unmarshal(e.Payload, &c)
		fmt.Println(e.Type, e.AggregateID, e.PartitionKey, c.Columns, c.Old["status"], c.New["status"], c.Soft)
	}
	// Output:
	// shop_order.created 1 shop_order:1 [] <nil> <nil> false
	// shop_order.updated 1 shop_order:1 [status] <nil> paid false
	// shop_order.updated 1 shop_order:1 [status] paid shipped false
	// shop_order.deleted 1 shop_order:1 [] <nil> <nil> true
}

// TrackFilter writes an event only for the changes that matter, here an
// order becoming paid; TrackEventType names it.
func ExampleTrackFilter() {
	db := exampleDB()
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		log.Fatal(err)
	}
	if err := db.AutoMigrate(&ShopOrder{}); err != nil {
		log.Fatal(err)
	}
	err := outbox.Track(db, &ShopOrder{},
		outbox.TrackOps(outbox.ChangeUpdated),
		outbox.TrackEventType(outbox.ChangeUpdated, "order.paid"),
		outbox.TrackFilter(func(c *outbox.Change, o *ShopOrder) bool {
			return c.Changed("status") && o.Status == "paid"
		}),
		outbox.TrackPartitionKey(func(o *ShopOrder) string { return "customer:" + o.Customer }),
	)
	if err != nil {
		log.Fatal(err)
	}
	o := ShopOrder{Customer: "ada", Status: "new"}
	db.Create(&o)
	db.Model(&o).Update("status", "packed")
	db.Model(&o).Update("status", "paid")

	var events []outbox.OutboxEvent
	db.Find(&events)
	for _, e := range events {
		fmt.Println(e.Type, e.AggregateID, e.PartitionKey)
	}
	// Output:
	// order.paid 1 customer:ada
}
