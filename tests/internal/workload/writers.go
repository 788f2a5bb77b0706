package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
)

// WriterConfig shapes the business transactions.
type WriterConfig struct {
	// Writers is the number of concurrent writers (default 2).
	Writers int
	// Keys is the number of partition keys of keyed events (default 32).
	Keys int
	// KeyedPercent of the events carry a partition key (default 50).
	KeyedPercent int
	// PerTx is the most orders (each with its event) per transaction
	// (default 3).
	PerTx int
	// Pause between two transactions of a writer (default 5ms).
	Pause time.Duration
	// Limit stops the writers once this many events are acknowledged
	// committed (0: until Stop).
	Limit int
	// MaxAttempts of each event (0: the relay's default).
	MaxAttempts int
	// Batched writes each transaction's orders in one INSERT (GORM's
	// Create of a slice; the plugin emits an event per row as before)
	// rather than one INSERT per order: more events per second.
	Batched bool
	// KeySeq numbers each key's orders in the commit order of their
	// transactions (Order.KeySeq), under a row lock per key held to the
	// commit (PostgreSQL): what checks a key's order where events have no
	// outbox id (WAL mode).
	KeySeq bool
}

func (c *WriterConfig) defaults() {
	if c.Writers == 0 {
		c.Writers = 2
	}
	if c.Keys == 0 {
		c.Keys = 32
	}
	if c.KeyedPercent == 0 {
		c.KeyedPercent = 50
	}
	if c.PerTx == 0 {
		c.PerTx = 3
	}
	if c.Pause == 0 {
		c.Pause = 5 * time.Millisecond
	}
}

// Writers commit orders, each with its event, until stopped.
type Writers struct {
	cfg    WriterConfig
	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}

	committed, failed, txs atomic.Int64
	errMu                  sync.Mutex
	lastErr                error
}

// WriterStats is what the writers saw.
type WriterStats struct {
	// Committed events: their transaction's COMMIT succeeded.
	Committed int64
	// Failed transactions (an error at any step, COMMIT included: an
	// error on COMMIT may still have committed).
	Failed  int64
	LastErr error
}

// StartWriters starts cfg.Writers writers on db.
func StartWriters(db *gorm.DB, cfg WriterConfig) *Writers {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	w := &Writers{cfg: cfg, cancel: cancel, done: make(chan struct{})}
	for range cfg.Writers {
		w.wg.Go(func() { w.run(ctx, db) })
	}
	go func() { w.wg.Wait(); close(w.done) }()
	return w
}

// Done is closed when the writers have stopped (Limit reached, or Stop).
func (w *Writers) Done() <-chan struct{} { return w.done }

// Committed is the number of events acknowledged committed so far.
func (w *Writers) Committed() int64 { return w.committed.Load() }

// Stop stops the writers and returns their counts.
func (w *Writers) Stop() WriterStats {
	w.cancel()
	<-w.done
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return WriterStats{Committed: w.committed.Load(), Failed: w.failed.Load(), LastErr: w.lastErr}
}

func (w *Writers) run(ctx context.Context, db *gorm.DB) {
	for ctx.Err() == nil {
		if w.cfg.Limit > 0 && w.committed.Load() >= int64(w.cfg.Limit) {
			return
		}
		n := 1 + rand.N(w.cfg.PerTx)
		if w.cfg.Limit > 0 {
			n = min(n, max(1, w.cfg.Limit-int(w.committed.Load())))
		}
		orders := make([]Order, n)
		for i := range orders {
			orders[i] = Order{EventID: uuid.NewString(), MaxAttempts: w.cfg.MaxAttempts}
			if rand.N(100) < w.cfg.KeyedPercent {
				orders[i].PartitionKey = fmt.Sprintf("k%03d", rand.N(w.cfg.Keys))
			}
		}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := db.WithContext(tctx).Transaction(func(tx *gorm.DB) error {
			if w.cfg.KeySeq {
				if err := numberKeys(tx, orders); err != nil {
					return err
				}
			}
			if w.cfg.Batched {
				return tx.Create(&orders).Error
			}
			for i := range orders {
				if err := tx.Create(&orders[i]).Error; err != nil {
					return err
				}
			}
			return nil
		})
		cancel()
		if err != nil && ctx.Err() != nil {
			return // stopped: an interrupted transaction is not a fault
		}
		if err != nil {
			w.failed.Add(1)
			w.errMu.Lock()
			w.lastErr = err
			w.errMu.Unlock()
			sleep(ctx, 50*time.Millisecond+rand.N(50*time.Millisecond))
			continue
		}
		w.committed.Add(int64(n))
		sleep(ctx, w.cfg.Pause)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Commit creates the orders, each with its event, in one transaction.
func Commit(db *gorm.DB, orders ...*Order) error {
	return db.Transaction(func(tx *gorm.DB) error {
		for _, o := range orders {
			if o.EventID == "" {
				o.EventID = uuid.NewString()
			}
			if err := tx.Create(o).Error; err != nil {
				return err
			}
		}
		return nil
	})
}

// Fill commits n orders with their events, in transactions of 1,000
// (batched inserts of 100), shaped like the writers' (cfg's Keys and
// KeyedPercent).
func Fill(db *gorm.DB, n int, cfg WriterConfig) error {
	cfg.defaults()
	for done := 0; done < n; done += 1000 {
		orders := make([]Order, min(1000, n-done))
		for i := range orders {
			orders[i] = Order{EventID: uuid.NewString(), MaxAttempts: cfg.MaxAttempts}
			if rand.N(100) < cfg.KeyedPercent {
				orders[i].PartitionKey = fmt.Sprintf("k%03d", rand.N(cfg.Keys))
			}
		}
		if err := db.Transaction(func(tx *gorm.DB) error { return tx.CreateInBatches(&orders, 100).Error }); err != nil {
			return fmt.Errorf("filling orders %d…: %w", done, err)
		}
	}
	return nil
}

// numberKeys gives each keyed order the next number of its key, locking
// the keys (in key order: no deadlock) until the transaction ends.
func numberKeys(tx *gorm.DB, orders []Order) error {
	slices.SortStableFunc(orders, func(a, b Order) int { return strings.Compare(a.PartitionKey, b.PartitionKey) })
	for i := range orders {
		if orders[i].PartitionKey == "" {
			continue
		}
		err := tx.Raw(`INSERT INTO fault_key_seqs (key, n) VALUES (?, 1)
			ON CONFLICT (key) DO UPDATE SET n = fault_key_seqs.n + 1 RETURNING n`, orders[i].PartitionKey).Scan(&orders[i].KeySeq).Error
		if err != nil {
			return err
		}
	}
	return nil
}
