package outbox_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"
)

// sqlCounter is a GORM logger that counts statements by prefix.
type sqlCounter struct {
	mu   sync.Mutex
	sqls []string
}

func (c *sqlCounter) LogMode(logger.LogLevel) logger.Interface { return c }
func (c *sqlCounter) Info(context.Context, string, ...any)     {}
func (c *sqlCounter) Warn(context.Context, string, ...any)     {}
func (c *sqlCounter) Error(context.Context, string, ...any)    {}
func (c *sqlCounter) Trace(_ context.Context, _ time.Time, fc func() (string, int64), _ error) {
	sql, _ := fc()
	c.mu.Lock()
	c.sqls = append(c.sqls, sql)
	c.mu.Unlock()
}

// containing counts the statements that contain s.
func (c *sqlCounter) containing(s string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, q := range c.sqls {
		if strings.Contains(q, s) {
			n++
		}
	}
	return n
}

func TestCreateInBatchesWritesEventsInFewStatements(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		const n, batch = 1000, 100
		orders := make([]Order, n)
		for i := range orders {
			orders[i].Customer = "bulk"
			if i%2 == 0 {
				orders[i].Key = "k" + string(rune('a'+i%7)) // some keyed events: one lock statement per batch
			}
		}
		counter := &sqlCounter{}
		must(t, db.Session(&gorm.Session{Logger: counter}).CreateInBatches(orders, batch).Error)

		if got := countEvents(t, db, "type = ?", "order.created"); got != n {
			t.Fatalf("%d events, want %d", got, n)
		}
		inserts := counter.containing("INSERT INTO outbox_events (") // on PostgreSQL inside WITH … (the NOTIFY)
		if inserts != n/batch {
			t.Errorf("%d INSERT statements for %d events in batches of %d, want %d (one per batch)", inserts, n, batch, n/batch)
		}
		if all := len(counter.sqls); all > 3*n/batch+2 {
			t.Errorf("%d statements in all for %d batches: %v", all, n/batch, counter.sqls[:5])
		}
	})
}
