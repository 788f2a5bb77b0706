package relay

import (
	"context"
	"database/sql"
	sqldriver "database/sql/driver"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
)

func (d *postgresDriver) returning() bool         { return true }
func (d *postgresDriver) concurrentWriters() bool { return true }

// claimConnSQL makes the claim connection use the claim's generic plan
// from its first execution: PostgreSQL otherwise plans a prepared
// statement afresh for its first five executions, and again five times
// after each change to the table's statistics (autovacuum, ANALYZE), at
// milliseconds each for the claim. The claim's parameters (cursor, size,
// worker, lease) do not change which plan is best.
func (d *postgresDriver) claimConnSQL() (string, string) {
	return "SET plan_cache_mode = force_generic_plan", "RESET plan_cache_mode"
}

// wakeups LISTENs on the table's channel (the INSERT that writes events
// NOTIFYs it, delivered when its transaction commits) on a connection of
// its own, outside db's pool, opened from the dialector's DSN: LISTEN holds
// its connection for good, and a pool of one connection would otherwise
// deadlock the relay. Without a DSN (a dialector given an open pool), or
// when the DSN alone does not connect, it takes a connection from the pool
// if the pool can spare one (its limit is not 1) and discards it
// afterwards. When the connection fails it reconnects after a pause;
// meanwhile the relay polls, and a wake-up is sent after reconnecting in
// case a notification was missed. When it cannot listen at all (no pgx,
// no connection to spare) it logs why and the relay polls.
func (d *postgresDriver) wakeups(ctx context.Context, db *gorm.DB, log *slog.Logger) <-chan struct{} {
	sqlDB, err := db.DB()
	if err != nil {
		log.Warn("LISTEN unavailable, polling", slog.Any("error", err))
		return nil // a nil channel never fires
	}
	dsn := ownDSN(db)
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
			err := d.listen(ctx, dsn, sqlDB, wake)
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, errCannotListen) {
				// Keep the channel open (closed means ctx ended): poll.
				log.Warn("LISTEN unavailable; polling", slog.Any("error", err))
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

// errCannotListen is wrapped by the reasons the relay cannot LISTEN at all.
var errCannotListen = errors.New("cannot LISTEN")

// ownDSN returns the DSN to open a LISTEN connection of the relay's own
// with, or "" when db's dialector was given an open pool instead.
func ownDSN(db *gorm.DB) string {
	if pd, ok := db.Dialector.(*postgres.Dialector); ok && pd.Config != nil && pd.Conn == nil {
		return pd.DSN
	}
	return ""
}

// listen holds one LISTEN connection until it fails or ctx ends.
func (d *postgresDriver) listen(ctx context.Context, dsn string, db *sql.DB, wake func()) error {
	spare := db.Stats().MaxOpenConnections != 1
	if dsn != "" {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			defer func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
				defer cancel()
				_ = conn.Close(cctx)
			}()
			return d.listenOn(ctx, conn, wake)
		}
		if !spare || ctx.Err() != nil {
			return err
		}
		// The pool's connections may be set up in ways the DSN alone is
		// not (a BeforeConnect hook): try one of them.
	}
	if !spare {
		return fmt.Errorf("%w: the pool holds one connection at most (SetMaxOpenConns(1)), which LISTEN would take for good, and the dialector has no DSN to open a connection of its own", errCannotListen)
	}
	c, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("%w: the pool's connections are not pgx (a wrapped driver?)", errCannotListen)
		}
		// The connection is LISTENing or broken: never return it to the pool.
		return errors.Join(d.listenOn(ctx, sc.Conn(), wake), sqldriver.ErrBadConn)
	})
}

// listenOn LISTENs on conn until it fails or ctx ends. The channel is the
// table's name as written, which is what the writer's pg_notify and
// notify send (quoted, so that a mixed-case name is not folded).
func (d *postgresDriver) listenOn(ctx context.Context, conn *pgx.Conn, wake func()) error {
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{d.table}.Sanitize()); err != nil {
		return err
	}
	wake() // events may have committed while nobody listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		wake()
	}
}

// notify wakes the relays listening on the table's channel.
func (d *postgresDriver) notify(db *gorm.DB) { db.Exec("SELECT pg_notify(?, '')", d.table) }

// analyze refreshes the table's statistics when they are stale. An outbox
// table swings from empty to a large backlog faster than autovacuum
// notices, and with the statistics of an empty table the planner sorts the
// whole backlog for every claim instead of reading the claim index in
// order. It analyzes only when the rows changed since the last ANALYZE
// outnumber a tenth of the rows the statistics know (and 1000): ANALYZE
// reads a sample of up to 30,000 pages, which on a table holding a large
// history costs more than the statistics could win. SKIP_LOCKED: when
// another relay is analyzing, this one need not. The name is not quoted,
// like everywhere else in the relay's SQL and in the migration, so that
// PostgreSQL folds a mixed-case name the same way.
func (d *postgresDriver) analyze(ctx context.Context, db *gorm.DB) error {
	db = db.WithContext(ctx)
	var stale []bool
	err := db.Raw(`SELECT s.n_mod_since_analyze > greatest(1000, 0.1 * c.reltuples)
		FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid WHERE s.relid = to_regclass(?)`, d.table).Scan(&stale).Error
	if err != nil || len(stale) == 0 || !stale[0] {
		return err
	}
	return db.Exec(`ANALYZE (SKIP_LOCKED) ` + d.table).Error
}
