package outbox_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// RegisterTracked registers Change as the payload of the event types
// Track gives a model (its name, TrackName, TrackEventType, TrackOps) at
// TrackVersion's version: a strict registry then accepts the model's
// events, and upcasters apply to them as to any type.
func TestRegisterTracked(t *testing.T) {
	reg := outbox.NewRegistry()
	must(t, outbox.RegisterTracked(reg, &ShopOrder{}))
	ledger := []outbox.TrackOption{outbox.TrackName("ledger"), outbox.TrackOps(outbox.ChangeCreated),
		outbox.TrackEventType(outbox.ChangeCreated, "ledger.booked"), outbox.TrackVersion(2)}
	must(t, outbox.RegisterTracked(reg, &LedgerEntry{}, ledger...))
	change := reflect.TypeFor[outbox.Change]()
	for _, k := range []struct {
		typ     string
		version int
		want    bool
	}{
		{"shop_order.created", 1, true}, {"shop_order.updated", 1, true}, {"shop_order.deleted", 1, true},
		{"ledger.booked", 2, true}, {"ledger.booked", 1, false}, {"ledger.updated", 2, false},
	} {
		if got, ok := reg.TypeOf(k.typ, k.version); ok != k.want || ok && got != change {
			t.Errorf("TypeOf(%s, %d) = %v, %v; want registered %v as outbox.Change", k.typ, k.version, got, ok, k.want)
		}
	}
	if err := outbox.RegisterTracked(reg, &ShopOrder{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("registering again: %v, want ErrInvalidConfig", err)
	}
	if err := outbox.RegisterTracked(reg, &struct{ Name string }{}); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("a model without a primary key: %v, want ErrInvalidConfig", err)
	}
	if err := outbox.RegisterTracked(reg, &Purchase{}, outbox.TrackVersion(0)); !errors.Is(err, outbox.ErrInvalidConfig) {
		t.Errorf("TrackVersion(0): %v, want ErrInvalidConfig", err)
	}
	must(t, outbox.RegisterUpcaster(reg, "ledger.booked", 1, func(p json.RawMessage) (json.RawMessage, error) { return p, nil }))

	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&ShopOrder{}, &LedgerEntry{}))
		must(t, outbox.Track(db, &ShopOrder{}))
		must(t, outbox.Track(db, &LedgerEntry{}, ledger...))
		o := ShopOrder{Customer: "ada", Status: "new"}
		must(t, db.Create(&o).Error)
		must(t, db.Model(&o).Update("status", "paid").Error)
		must(t, db.Delete(&o).Error)
		must(t, db.Create(&LedgerEntry{Book: "b", Entry: 1, Amount: 3}).Error)
		var got []string
		for _, e := range events(t, db) {
			got = append(got, e.Type+" v"+strconv.Itoa(e.Version))
		}
		want := []string{"shop_order.created v1", "shop_order.updated v1", "shop_order.deleted v1", "ledger.booked v2"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("events %q, want %q", got, want)
		}
	})
	env := &outbox.Envelope{Type: "ledger.booked", Version: 1, Payload: []byte(`{"op":"created","key":{"book":"b","entry":1}}`)}
	if err := reg.Check(env); err != nil || env.Version != 2 {
		t.Errorf("Check of a version 1 event: %v, version %d; want it upcast to 2 and accepted", err, env.Version)
	}
}
