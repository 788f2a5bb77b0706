package outbox_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// The three ways of writing one business row that BenchmarkWrite compares.
type (
	// plainOrder writes no event.
	plainOrder struct {
		ID       uint `gorm:"primaryKey"`
		Customer string
		Amount   int
	}
	// rawOrder writes its event with a hand-written INSERT.
	rawOrder plainOrder
	// emitOrder writes its event with outbox.Emit.
	emitOrder plainOrder
)

func (plainOrder) TableName() string { return "bench_orders" }
func (rawOrder) TableName() string   { return "bench_orders" }
func (emitOrder) TableName() string  { return "bench_orders" }

// rawInsert is the outbox row an application would write by hand: the same
// columns Emit writes, with the event id, payload and clock it makes.
func (o *rawOrder) AfterCreate(tx *gorm.DB) error {
	payload, err := json.Marshal(o)
	if err != nil {
		return err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return err
	}
	k, _ := dialect.Of(tx)
	now, nowArgs := k.Now()
	args := append([]any{id.String(), "order.created", 1, "", "order", fmt.Sprint(o.ID), "", "", payload, nil, 0}, nowArgs...)
	if k == dialect.SQLite {
		args = append(args, nowArgs...)
		return tx.Exec(`INSERT INTO outbox_events (event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, max_attempts, available_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, `+now+`, `+now+`)`, args...).Error
	}
	return tx.Exec(`INSERT INTO outbox_events (event_id, type, version, tenant_id, aggregate_type, aggregate_id, partition_key, topic, payload, headers, max_attempts, available_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, `+now+`)`, args...).Error
}

func (o *emitOrder) AfterCreate(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{Type: "order.created", AggregateType: "order", AggregateID: fmt.Sprint(o.ID), Payload: o})
}

// BenchmarkWrite measures one business transaction (one order, or a
// CreateInBatches of 100 orders) three ways, per dialect: without an event
// (none), with a hand-written INSERT of the outbox row from AfterCreate
// (raw), and with outbox.Emit from AfterCreate (emit). The three run
// interleaved, in rotating order, so that drift of the machine hits all of
// them alike; each is reported as ns per transaction, with the outbox's
// added cost relative to the hand-written one:
//
//	emit/raw-added = (emit - none) / (raw - none)
//
//	go test -run '^$' -bench BenchmarkWrite -benchtime 3s .
func BenchmarkWrite(b *testing.B) {
	for _, d := range testenv.Dialects {
		b.Run(d, func(b *testing.B) {
			db := testenv.Open(b, d)
			if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
				b.Fatal(err)
			}
			if err := db.AutoMigrate(&plainOrder{}); err != nil {
				b.Fatal(err)
			}
			b.Run("one", func(b *testing.B) {
				compareWrites(b, db, func(variant int, i int) any {
					switch variant {
					case 0:
						return &plainOrder{Customer: "c", Amount: i}
					case 1:
						return &rawOrder{Customer: "c", Amount: i}
					default:
						return &emitOrder{Customer: "c", Amount: i}
					}
				}, 0)
			})
			b.Run("batch100", func(b *testing.B) {
				compareWrites(b, db, func(variant int, _ int) any {
					switch variant {
					case 0:
						return make([]plainOrder, 100)
					case 1:
						return make([]rawOrder, 100)
					default:
						return make([]emitOrder, 100)
					}
				}, 100)
			})
		})
	}
}

func compareWrites(b *testing.B, db *gorm.DB, model func(variant, i int) any, batch int) {
	db.Exec("DELETE FROM outbox_events")
	db.Exec("DELETE FROM bench_orders")
	var spent [3]time.Duration
	n := 0
	for b.Loop() {
		for k := range 3 {
			v := (n + k) % 3
			m := model(v, n)
			start := time.Now()
			var err error
			if batch > 0 {
				err = db.CreateInBatches(m, batch).Error
			} else {
				err = db.Create(m).Error
			}
			spent[v] += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
		}
		n++
	}
	per := func(v int) float64 { return float64(spent[v].Nanoseconds()) / float64(n) }
	b.ReportMetric(per(0), "none-ns/tx")
	b.ReportMetric(per(1), "raw-ns/tx")
	b.ReportMetric(per(2), "emit-ns/tx")
	b.ReportMetric((per(2)-per(0))/(per(1)-per(0)), "emit/raw-added")
}
