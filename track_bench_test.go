package outbox_test

import (
	"strconv"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// trackOrder is written to bench_orders like plainOrder, and is tracked.
type trackOrder plainOrder

func (trackOrder) TableName() string { return "bench_orders" }

// keyedOrder emits, from a hand-written AfterCreate, the event Track writes
// for trackOrder: the same type, aggregate and partition key (which Track
// sets so that a row's events stay in order), the row as payload.
type keyedOrder plainOrder

func (keyedOrder) TableName() string { return "bench_orders" }

func (o *keyedOrder) AfterCreate(tx *gorm.DB) error {
	id := strconv.FormatUint(uint64(o.ID), 10)
	return outbox.Emit(tx, outbox.Event{Type: "order.created", AggregateType: "order", AggregateID: id,
		PartitionKey: "order:" + id, Payload: o})
}

// BenchmarkTrack compares the cost Track adds to a write with the cost of
// a hand-written AfterCreate hook that calls Emit with the same event
// (keyedOrder), per dialect, for one
// order per transaction and for a CreateInBatches of 100:
//
//	track/emit-added = (track - none) / (emit - none)
//
// The three variants run interleaved, in rotating order, as in
// BenchmarkWrite.
//
//	go test -run '^$' -bench BenchmarkTrack -benchtime 3s .
func BenchmarkTrack(b *testing.B) {
	for _, d := range testenv.Dialects {
		b.Run(d, func(b *testing.B) {
			db := testenv.Open(b, d)
			if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
				b.Fatal(err)
			}
			if err := db.AutoMigrate(&plainOrder{}); err != nil {
				b.Fatal(err)
			}
			if err := outbox.Track(db, &trackOrder{}, outbox.TrackName("order")); err != nil {
				b.Fatal(err)
			}
			b.Run("one", func(b *testing.B) {
				compareTrack(b, db, func(variant, i int) any {
					switch variant {
					case 0:
						return &plainOrder{Customer: "c", Amount: i}
					case 1:
						return &keyedOrder{Customer: "c", Amount: i}
					default:
						return &trackOrder{Customer: "c", Amount: i}
					}
				}, 0)
			})
			b.Run("batch100", func(b *testing.B) {
				compareTrack(b, db, func(variant, _ int) any {
					switch variant {
					case 0:
						return make([]plainOrder, 100)
					case 1:
						return make([]keyedOrder, 100)
					default:
						return make([]trackOrder, 100)
					}
				}, 100)
			})
		})
	}
}

func compareTrack(b *testing.B, db *gorm.DB, model func(variant, i int) any, batch int) {
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
	b.ReportMetric(per(1), "emit-ns/tx")
	b.ReportMetric(per(2), "track-ns/tx")
	b.ReportMetric((per(2)-per(0))/(per(1)-per(0)), "track/emit-added")
}

// BenchmarkTrackBulk measures a bulk update of 100 rows (no key in the
// model) three ways, per dialect: untracked with no event (plain); by hand,
// as an application would without Track, reading and locking the rows,
// updating them and emitting one event per row in one transaction (hand);
// and tracked (track: the same reads, plus a read of the rows after the
// update for the payload):
//
//	track/hand = track / hand
//
//	go test -run '^$' -bench BenchmarkTrackBulk -benchtime 2s .
func BenchmarkTrackBulk(b *testing.B) {
	for _, d := range testenv.Dialects {
		b.Run(d, func(b *testing.B) {
			db := testenv.Open(b, d)
			if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
				b.Fatal(err)
			}
			if err := db.AutoMigrate(&plainOrder{}); err != nil {
				b.Fatal(err)
			}
			if err := outbox.Track(db, &trackOrder{}, outbox.TrackName("order")); err != nil {
				b.Fatal(err)
			}
			if err := db.Create(make([]plainOrder, 100)).Error; err != nil {
				b.Fatal(err)
			}
			var spent [3]time.Duration
			n := 0
			for b.Loop() {
				for k := range 3 {
					v := (n + k) % 3
					start := time.Now()
					if err := bulkUpdate(db, v, n); err != nil {
						b.Fatal(err)
					}
					spent[v] += time.Since(start)
				}
				n++
			}
			per := func(v int) float64 { return float64(spent[v].Nanoseconds()) / float64(n) }
			b.ReportMetric(per(0), "plain-ns/tx")
			b.ReportMetric(per(1), "hand-ns/tx")
			b.ReportMetric(per(2), "track-ns/tx")
			b.ReportMetric(per(2)/per(1), "track/hand")
		})
	}
}

func bulkUpdate(db *gorm.DB, variant, n int) error {
	switch variant {
	case 0:
		return db.Model(&plainOrder{}).Where("customer = ?", "").Update("amount", n).Error
	case 2:
		return db.Model(&trackOrder{}).Where("customer = ?", "").Update("amount", n).Error
	}
	return db.Transaction(func(tx *gorm.DB) error {
		var rows []plainOrder
		if err := tx.Clauses(clause.Locking{Strength: clause.LockingStrengthUpdate}).Where("customer = ?", "").Find(&rows).Error; err != nil {
			return err
		}
		if err := tx.Model(&plainOrder{}).Where("customer = ?", "").Update("amount", n).Error; err != nil {
			return err
		}
		events := make([]outbox.Event, len(rows))
		for i := range rows {
			rows[i].Amount = n
			id := strconv.FormatUint(uint64(rows[i].ID), 10)
			events[i] = outbox.Event{Type: "order.updated", AggregateType: "order", AggregateID: id, PartitionKey: "order:" + id, Payload: &rows[i]}
		}
		return outbox.Emit(tx, events...)
	})
}
