package relay

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/gorm"
)

func (d *postgresDriver) returning() bool         { return true }
func (d *postgresDriver) concurrentWriters() bool { return true }

// wakeups LISTENs on the table's channel (the migration's trigger NOTIFYs
// it when a transaction that inserted events commits) on a connection of
// its own, taken from db's pool and discarded afterwards. When the
// connection fails it reconnects after a pause; meanwhile the relay polls,
// and a wake-up is sent after reconnecting in case a notification was
// missed. Without pgx (a *sql.DB of another driver) it returns nil.
func (d *postgresDriver) wakeups(ctx context.Context, db *gorm.DB, log *slog.Logger) <-chan struct{} {
	sqlDB, err := db.DB()
	if err != nil {
		log.Warn("LISTEN unavailable, polling", slog.Any("error", err))
		return nil // a nil channel never fires
	}
	ch := make(chan struct{}, 1)
	wake := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(ch)
		pause := 100 * time.Millisecond
		for ctx.Err() == nil {
			err := d.listen(ctx, sqlDB, wake)
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errNotPgx) {
				// Keep the channel open (closed means ctx ended): poll.
				log.Warn("LISTEN unavailable: the pool's connections are not pgx (a wrapped driver?); polling")
				<-ctx.Done()
				return
			}
			log.Warn("LISTEN connection lost; polling until it is back", slog.Any("error", err), slog.Duration("retry_in", pause))
			select {
			case <-ctx.Done():
				return
			case <-time.After(pause):
			}
			pause = min(2*pause, 10*time.Second)
		}
	}()
	return ch
}

var errNotPgx = errors.New("not a pgx connection")

// listen holds one connection until it fails or ctx ends.
func (d *postgresDriver) listen(ctx context.Context, db *sql.DB, wake func()) error {
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		pg := sc.Conn()
		if _, err := pg.Exec(ctx, `LISTEN "`+d.table+`"`); err != nil {
			return err
		}
		wake() // events may have committed while nobody listened
		for {
			if _, err := pg.WaitForNotification(ctx); err != nil {
				// The connection is LISTENing or broken: never return it to the pool.
				return errors.Join(err, sqldriver.ErrBadConn)
			}
			wake()
		}
	})
}

// notify wakes the relays listening on the table's channel.
func (d *postgresDriver) notify(db *gorm.DB) { db.Exec("SELECT pg_notify(?, '')", d.table) }

// analyze refreshes the table's statistics. An outbox table swings from
// empty to a large backlog faster than autovacuum notices, and with the
// statistics of an empty table the planner sorts the whole backlog for
// every claim instead of reading the claim index in order. SKIP_LOCKED:
// when another relay is analyzing, this one need not.
func (d *postgresDriver) analyze(ctx context.Context, db *gorm.DB) error {
	return db.WithContext(ctx).Exec(`ANALYZE (SKIP_LOCKED) "` + d.table + `"`).Error
}
