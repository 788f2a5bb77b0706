// Command quickstart shows gorm-outbox end to end on SQLite, with no
// server: orders are written in transactions (some roll back), a relay
// delivers their events to in-process handlers, and a summary checks that
// exactly the committed orders were announced, each once.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/inproc"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/relay"
)

// Order is a business row. Its AfterCreate hook emits order.placed in the
// same transaction, so the event exists exactly when the order does.
type Order struct {
	ID       uint
	Customer string
	Amount   int
}

func (o *Order) AfterCreate(tx *gorm.DB) error {
	return outbox.Emit(tx, outbox.Event{
		Type:          "order.placed",
		AggregateType: "order",
		AggregateID:   strconv.Itoa(int(o.ID)),
		PartitionKey:  "customer-" + o.Customer, // a customer's events arrive in order
		Payload:       o,
	})
}

// CustomerStats is written by a transactional handler: exactly once per event.
type CustomerStats struct {
	Customer string `gorm:"primaryKey"`
	Orders   int
	Total    int
}

var errDeclined = errors.New("payment declined")

func main() {
	orders := flag.Int("orders", 40, "orders to attempt; every fifth is rolled back")
	verbose := flag.Bool("v", false, "log the relay at debug level")
	flag.Parse()
	if err := run(*orders, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(n int, verbose bool) error {
	dir, err := os.MkdirTemp("", "gorm-outbox-quickstart")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// openSQLite (sqlite_cgo.go, sqlite_purego.go) picks the driver: cgo or pure Go.
	db, err := gorm.Open(openSQLite(filepath.Join(dir, "shop.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}

	// 1. Install the outbox and create the tables.
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		return err
	}
	if err := db.AutoMigrate(&Order{}, &CustomerStats{}); err != nil {
		return err
	}
	store, err := idempotency.NewStore(db)
	if err != nil {
		return err
	}

	// 2. In-process handlers. Each records its success per event, so a
	//    redelivered event does not run a handler twice.
	level := slog.LevelWarn
	if verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	var receipts atomic.Int64
	mux := inproc.NewMux(store, inproc.WithLogger(log))
	err = mux.HandleFunc("order.placed", "send-receipt", func(_ context.Context, e *outbox.Envelope) error {
		var o Order
		if err := e.Unmarshal(&o); err != nil {
			return outbox.Permanent(err)
		}
		receipts.Add(1)
		fmt.Printf("  receipt: order %d for %s, %d EUR (attempt %d)\n", o.ID, o.Customer, o.Amount, e.Attempt)
		return nil
	})
	if err != nil {
		return err
	}
	err = mux.HandleTx("order.placed", "customer-stats", func(_ context.Context, tx *gorm.DB, e *outbox.Envelope) error {
		var o Order
		if err := e.Unmarshal(&o); err != nil {
			return outbox.Permanent(err)
		}
		return tx.Exec(`INSERT INTO customer_stats (customer, orders, total) VALUES (?, 1, ?)
			ON CONFLICT (customer) DO UPDATE SET orders = orders + 1, total = total + excluded.total`, o.Customer, o.Amount).Error
	})
	if err != nil {
		return err
	}

	// 3. The relay, as a worker process would run it.
	r, err := relay.New(db, mux, relay.WithLogger(log), relay.WithPollInterval(100*time.Millisecond))
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	relayDone := make(chan error, 1)
	go func() { relayDone <- r.Start(ctx) }()

	// 4. The application writes orders; every fifth payment is declined
	//    and its transaction rolls back, taking its event with it.
	customers := []string{"ada", "bob", "cyd"}
	committed, rolledBack := 0, 0
	fmt.Printf("placing %d orders...\n", n)
	for i := range n {
		err := db.Transaction(func(tx *gorm.DB) error {
			o := Order{Customer: customers[i%len(customers)], Amount: 10 + i}
			if err := tx.Create(&o).Error; err != nil {
				return err
			}
			if i%5 == 4 {
				return errDeclined
			}
			return nil
		})
		switch {
		case err == nil:
			committed++
		case errors.Is(err, errDeclined):
			rolledBack++
			fmt.Printf("  order %d: %v, rolled back\n", i+1, err)
		default:
			return err
		}
	}

	// 5. Wait until the relay has delivered every committed event.
	insp, err := relay.NewInspector(db)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		stats, err := insp.GetStats(context.Background())
		if err != nil {
			return err
		}
		published := stats.Counts[outbox.StatusPublished]
		fmt.Printf("progress: %d/%d events published\n", published, committed)
		if published == int64(committed) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events published after 30s", published, committed)
		}
		time.Sleep(200 * time.Millisecond)
	}
	stop()
	if err := <-relayDone; err != nil {
		return err
	}

	// 6. The summary: exactly the committed orders were announced, once.
	var orderRows, eventRows int64
	db.Model(&Order{}).Count(&orderRows)
	db.Model(&outbox.OutboxEvent{}).Count(&eventRows)
	var stats []CustomerStats
	db.Order("customer").Find(&stats)
	statOrders := 0
	fmt.Println("\nsummary")
	fmt.Printf("  orders committed:    %d (rolled back: %d)\n", committed, rolledBack)
	fmt.Printf("  orders in the table: %d\n", orderRows)
	fmt.Printf("  events in the outbox: %d\n", eventRows)
	fmt.Printf("  receipts sent:       %d\n", receipts.Load())
	for _, s := range stats {
		statOrders += s.Orders
		fmt.Printf("  customer %-4s %2d orders, %4d EUR\n", s.Customer, s.Orders, s.Total)
	}
	if orderRows != int64(committed) || eventRows != int64(committed) || receipts.Load() != int64(committed) || statOrders != committed {
		return fmt.Errorf("mismatch: %d committed, %d orders, %d events, %d receipts, %d counted", committed, orderRows, eventRows, receipts.Load(), statOrders)
	}
	fmt.Println("ok: every committed order was announced exactly once, and no rolled-back one was")
	return nil
}
