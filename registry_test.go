package outbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// orderPlaced is a registered payload: order_id required (by its tag),
// tenant its tenant field, amount an int.
type orderPlaced struct {
	OrderID string `json:"order_id" outbox:"required"`
	Tenant  string `json:"tenant" outbox:"tenant"`
	Amount  int    `json:"amount"`
	Note    string `json:"note,omitempty"`
}

// eachRegistryDB runs fn per dialect with a plugin holding reg.
func eachRegistryDB(t *testing.T, reg *outbox.Registry, fn func(t *testing.T, db *gorm.DB)) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true, Registry: reg}))
		must(t, db.AutoMigrate(&Order{}, &Account{}))
		fn(t, db)
	})
}

// A strict registry refuses an unregistered type or version with
// ErrInvalidEvent naming the type; the whole transaction, business row
// included, rolls back.
func TestRegistryStrictRefusesUnregistered(t *testing.T) {
	reg := outbox.NewRegistry()
	must(t, outbox.Register[Order](reg, "order.created", 1))
	must(t, outbox.Register[orderPlaced](reg, "order.placed", 1))
	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		for _, e := range []outbox.Event{
			{Type: "order.unknown", Payload: map[string]int{"a": 1}},
			{Type: "order.placed", Version: 2, Payload: orderPlaced{OrderID: "1"}},
		} {
			err := db.Transaction(func(tx *gorm.DB) error {
				if err := tx.Create(&Order{Customer: "c"}).Error; err != nil {
					return err
				}
				return outbox.Emit(tx, e)
			})
			if !errors.Is(err, outbox.ErrInvalidEvent) || !strings.Contains(err.Error(), e.Type) || !strings.Contains(err.Error(), "not registered") {
				t.Errorf("emit of unregistered %s v%d: %v, want ErrInvalidEvent naming the type", e.Type, e.Version, err)
			}
		}
		if n, o := countEvents(t, db), count(t, db, &Order{}); n != 0 || o != 0 {
			t.Errorf("%d events, %d orders after refused writes, want none", n, o)
		}
		// Registered: the hook's event (a *Order) and a typed Emit pass.
		must(t, db.Create(&Order{Customer: "c", Amount: 3}).Error)
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{Type: "order.placed", Payload: orderPlaced{OrderID: "9"}})
		}))
		if n := countEvents(t, db); n != 2 {
			t.Errorf("%d events written, want 2", n)
		}
	})
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A lenient registry writes unregistered events and logs each type once;
// registered types are still checked.
func TestRegistryLenientLogsOnce(t *testing.T) {
	eachDBWithLog := func(t *testing.T, db *gorm.DB) {
		var logs syncBuffer
		reg := outbox.NewRegistry(outbox.Lenient(), outbox.RegistryLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		must(t, outbox.Register[orderPlaced](reg, "order.placed", 1))
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true, Registry: reg}))
		for range 3 {
			must(t, db.Transaction(func(tx *gorm.DB) error {
				return outbox.Emit(tx, outbox.Event{Type: "free.a"}, outbox.Event{Type: "free.b"}, outbox.Event{Type: "free.a", Version: 2})
			}))
		}
		if n := countEvents(t, db); n != 9 {
			t.Errorf("%d events written, want 9", n)
		}
		for _, typ := range []string{"free.a", "free.b"} {
			if c := strings.Count(logs.String(), "event_type="+typ+" "); c != 1 {
				t.Errorf("%s logged %d times, want once:\n%s", typ, c, logs.String())
			}
		}
		err := db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{Type: "order.placed", Payload: json.RawMessage(`{"amount":1}`)})
		})
		if !errors.Is(err, outbox.ErrInvalidEvent) {
			t.Errorf("lenient registry accepted a registered type's bad payload: %v", err)
		}
	}
	testenv.Each(t, eachDBWithLog)
}

// A registered payload is checked at write: required fields, field types,
// unknown fields, the tenant field against TenantID, and Validate. Each
// bad payload is refused naming the reason, and nothing is written.
func TestRegistryRefusesBadPayloads(t *testing.T) {
	reg := outbox.NewRegistry()
	must(t, outbox.Register[orderPlaced](reg, "order.placed", 1,
		outbox.Validate(func(o orderPlaced) error {
			if o.Amount < 0 {
				return errors.New("amount must not be negative")
			}
			return nil
		})))
	must(t, outbox.Register[map[string]any](reg, "cart.checked", 1, outbox.Required("cart.id", "lines")))
	good := orderPlaced{OrderID: "o1", Tenant: "t1", Amount: 5}
	cases := []struct {
		name, want string
		event      outbox.Event
	}{
		{"missing required", `"order_id" is missing`, outbox.Event{Type: "order.placed", TenantID: "t1", Payload: json.RawMessage(`{"tenant":"t1","amount":1}`)}},
		{"empty required", `"order_id" is missing`, outbox.Event{Type: "order.placed", TenantID: "t1", Payload: orderPlaced{Tenant: "t1"}}},
		{"wrong field type", "amount", outbox.Event{Type: "order.placed", TenantID: "t1", Payload: []byte(`{"order_id":"o1","tenant":"t1","amount":"ten"}`)}},
		{"wrong type in a map", "amount", outbox.Event{Type: "order.placed", TenantID: "t1", Payload: map[string]any{"order_id": "o1", "tenant": "t1", "amount": true}}},
		{"unknown field", "unknown field", outbox.Event{Type: "order.placed", TenantID: "t1", Payload: map[string]any{"order_id": "o1", "tenant": "t1", "colour": "red"}}},
		{"tenant mismatch", `payload's tenant is "t2"`, outbox.Event{Type: "order.placed", TenantID: "t1", Payload: orderPlaced{OrderID: "o1", Tenant: "t2"}}},
		{"tenant missing on the event", `payload's tenant is "t1"`, outbox.Event{Type: "order.placed", Payload: &good}},
		{"validate", "must not be negative", outbox.Event{Type: "order.placed", TenantID: "t1", Payload: orderPlaced{OrderID: "o1", Tenant: "t1", Amount: -1}}},
		{"empty array", `"lines"`, outbox.Event{Type: "cart.checked", Payload: json.RawMessage(`{"cart":{"id":1},"lines":[ ]}`)}},
		{"nested required", `"cart.id"`, outbox.Event{Type: "cart.checked", Payload: map[string]any{"cart": map[string]any{}, "lines": []int{1}}}},
		{"not an object", "cannot unmarshal array", outbox.Event{Type: "cart.checked", Payload: []int{1}}},
	}
	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		for _, c := range cases {
			err := db.Transaction(func(tx *gorm.DB) error { return outbox.Emit(tx, c.event) })
			if !errors.Is(err, outbox.ErrInvalidEvent) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want ErrInvalidEvent saying %q", c.name, err, c.want)
			}
		}
		if n := countEvents(t, db); n != 0 {
			t.Fatalf("%d events written by refused emits", n)
		}
		// The same type, valid, in each form a payload can take.
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx,
				outbox.Event{Type: "order.placed", TenantID: "t1", Payload: good},
				outbox.Event{Type: "order.placed", TenantID: "t1", Payload: &good},
				outbox.Event{Type: "order.placed", TenantID: "t1", Payload: json.RawMessage(`{"order_id":"o1","tenant":"t1","amount":0}`)},
				outbox.Event{Type: "order.placed", TenantID: "t1", Payload: map[string]any{"order_id": "o1", "tenant": "t1"}},
				outbox.Event{Type: "cart.checked", Payload: map[string]any{"cart": map[string]any{"id": 0}, "lines": []int{1}}},
			)
		}))
		if n := countEvents(t, db); n != 5 {
			t.Errorf("%d valid events written, want 5", n)
		}
	})
}

// Events recorded on an aggregate are checked as Emit's are.
func TestRegistryChecksRecordedEvents(t *testing.T) {
	reg := outbox.NewRegistry()
	must(t, outbox.Register[map[string]int](reg, "account.deposited", 1, outbox.Required("amount")))
	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		a := &Account{Owner: "o"}
		a.Record(outbox.Event{Type: "account.opened"})
		if err := db.Create(a).Error; !errors.Is(err, outbox.ErrInvalidEvent) {
			t.Errorf("create with an unregistered recorded event: %v, want ErrInvalidEvent", err)
		}
		if n, m := countEvents(t, db), count(t, db, &Account{}); n != 0 || m != 0 {
			t.Errorf("%d events, %d accounts after a refused write", n, m)
		}
		b := &Account{Owner: "o"}
		b.Deposit(5)
		must(t, db.Create(b).Error)
		if n := countEvents(t, db); n != 1 {
			t.Errorf("%d events, want 1", n)
		}
	})
}

// Track's events are checked too: under a strict registry, a tracked
// model's events must be registered (RegisterTracked registers
// outbox.Change, their payload), and a refused one rolls back the row
// that caused it.
func TestRegistryChecksTrackedEvents(t *testing.T) {
	reg := outbox.NewRegistry()
	must(t, outbox.Register[outbox.Change](reg, "shop_order.created", 1))
	eachRegistryDB(t, reg, func(t *testing.T, db *gorm.DB) {
		must(t, db.AutoMigrate(&ShopOrder{}))
		must(t, outbox.Track(db, &ShopOrder{}))
		o := ShopOrder{Customer: "ada", Status: "new"}
		must(t, db.Create(&o).Error)
		err := db.Model(&o).Update("status", "paid").Error
		if !errors.Is(err, outbox.ErrInvalidEvent) || !strings.Contains(err.Error(), "shop_order.updated") {
			t.Errorf("update of a tracked model whose event is not registered: %v", err)
		}
		var stored ShopOrder
		must(t, db.First(&stored, o.ID).Error)
		if stored.Status != "new" || countEvents(t, db) != 1 {
			t.Errorf("refused update left status %q and %d events", stored.Status, countEvents(t, db))
		}
	})
}
