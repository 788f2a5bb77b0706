package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverdatabasesql"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

// Order is the business row of every write.
type Order struct {
	ID        int64 `gorm:"primaryKey"`
	Customer  string
	Amount    float64 `gorm:"type:numeric"`
	CreatedAt time.Time
}

// hookedOrder is the same row as gorm-outbox's users write it: its
// AfterCreate hook emits the event in the row's transaction.
type hookedOrder Order

// TableName implements gorm.Tabler.
func (hookedOrder) TableName() string { return "orders" }

// AfterCreate emits the order's event.
func (o *hookedOrder) AfterCreate(tx *gorm.DB) error {
	return outbox.Emit(tx, orderEvent(o.ID))
}

// OrderCreated is the event's payload (River's job args).
type OrderCreated struct {
	OrderID  int64   `json:"order_id"`
	Customer string  `json:"customer"`
	Amount   float64 `json:"amount"`
	Seq      int     `json:"seq,omitempty"`
}

// Kind implements river.JobArgs.
func (OrderCreated) Kind() string { return "order_created" }

func orderEvent(id int64) outbox.Event {
	return outbox.Event{Type: "order.created", AggregateType: "order", AggregateID: strconv.FormatInt(id, 10),
		Payload: OrderCreated{OrderID: id, Customer: "customer", Amount: 12.34}}
}

// variant is one way of writing a business transaction with its event.
type variant struct {
	name string
	tx   func(ctx context.Context, i int) error
}

// writeVariants: the business write alone, then with each outbox.
func (e *env) writeVariants() ([]variant, error) {
	rc, err := river.NewClient(riverdatabasesql.New(e.sqlDB), &river.Config{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	plain := func(after func(tx *gorm.DB, o *Order) error) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			return e.base.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				o := Order{Customer: fmt.Sprintf("customer-%d", i%1000), Amount: 12.34}
				if err := tx.Create(&o).Error; err != nil || after == nil {
					return err
				}
				return after(tx, &o)
			})
		}
	}
	hooked := func(db *gorm.DB) func(ctx context.Context, i int) error {
		return func(ctx context.Context, i int) error {
			return db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
				return tx.Create(&hookedOrder{Customer: fmt.Sprintf("customer-%d", i%1000), Amount: 12.34}).Error
			})
		}
	}
	return []variant{
		{"baseline", plain(nil)},
		{"raw INSERT", plain(func(tx *gorm.DB, o *Order) error {
			p, _ := json.Marshal(OrderCreated{OrderID: o.ID, Customer: o.Customer, Amount: o.Amount})
			return tx.Exec(`INSERT INTO bench_outbox (event_id, type, payload) VALUES (?, 'order.created', ?)`, uuid.New(), string(p)).Error
		})},
		{"gorm-outbox table mode", hooked(e.tableDB)},
		{"gorm-outbox WAL mode", hooked(e.walDB)},
		{"River InsertTx", plain(func(tx *gorm.DB, o *Order) error {
			_, err := rc.InsertTx(tx.Statement.Context, tx.Statement.ConnPool.(*sql.Tx), OrderCreated{OrderID: o.ID, Customer: o.Customer, Amount: o.Amount}, nil)
			return err
		})},
		{"watermill-sql forwarder", plain(func(tx *gorm.DB, o *Order) error {
			p, _ := json.Marshal(OrderCreated{OrderID: o.ID, Customer: o.Customer, Amount: o.Amount})
			return publishWatermill(tx.Statement.ConnPool.(*sql.Tx), message.NewMessage(watermill.NewUUID(), p))
		})},
	}, nil
}

// writeResult is one variant's figures over the rounds.
type writeResult struct {
	name      string
	roundUS   []float64 // mean µs per transaction of each round
	serverCPU float64   // server CPU seconds over all its transactions
	clientCPU float64   // this process's CPU seconds over them
	txs       int
}

// writeRounds runs n transactions of each variant, interleaved in rounds
// whose order rotates, after 200 untimed ones each; the slots are drained
// meanwhile by nobody (the events stay).
func (e *env) writeRounds(ctx context.Context, n, rounds int) ([]*writeResult, error) {
	vs, err := e.writeVariants()
	if err != nil {
		return nil, err
	}
	res := make([]*writeResult, len(vs))
	for k, v := range vs {
		res[k] = &writeResult{name: v.name}
		for i := range 200 {
			if err := v.tx(ctx, i); err != nil {
				return nil, fmt.Errorf("%s: %w", v.name, err)
			}
		}
	}
	per := max(n/rounds, 1)
	for r := range rounds {
		for j := range vs {
			k := (j + r) % len(vs)
			if r%2 == 1 {
				k = len(vs) - 1 - k
			}
			cpu0, self0, t0 := e.cpu.seconds(), selfCPU(), time.Now()
			for i := range per {
				if err := vs[k].tx(ctx, i); err != nil {
					return nil, fmt.Errorf("%s: %w", vs[k].name, err)
				}
			}
			res[k].roundUS = append(res[k].roundUS, float64(time.Since(t0).Microseconds())/float64(per))
			res[k].serverCPU += e.cpu.seconds() - cpu0
			res[k].clientCPU += selfCPU() - self0
			res[k].txs += per
		}
	}
	return res, nil
}

// added is the median over rounds of the variant's mean minus the
// baseline's mean in the same round (µs per transaction).
func added(base, v *writeResult) float64 {
	d := make([]float64, len(v.roundUS))
	for i := range d {
		d[i] = v.roundUS[i] - base.roundUS[i]
	}
	return median(d)
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
