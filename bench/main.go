// Command bench measures, in one run on one PostgreSQL with
// wal_level=logical, gorm-outbox in table mode and in WAL mode beside
// River, watermill-sql's forwarder and a hand-written SKIP LOCKED outbox:
// the write path's added cost, the relays' drain rate (one and two
// relays), commit-to-publish latency and the server's CPU per event. It
// prints a markdown report ending with WAL mode's goals as ratios of this
// run. Run it with ./run.sh, which starts and removes a throw-away server.
//
// It is a module of its own so that River and watermill never reach the
// library's users.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
)

var (
	dsn       = flag.String("dsn", "", "PostgreSQL DSN of a throw-away server with wal_level=logical (run.sh sets it)")
	pgdata    = flag.String("pgdata", "", "the server's data directory: its postmaster.pid names the processes whose CPU is measured")
	relayN    = flag.Int("n", 50000, "events per relay drain")
	writeN    = flag.Int("write-n", 4000, "transactions per write variant, over -rounds rounds")
	rounds    = flag.Int("rounds", 50, "write rounds (variants interleaved, order rotated): many short rounds pair up the machine's load bursts")
	latN      = flag.Int("lat-n", 1000, "events per latency run, one per transaction, 2 ms apart")
	repeat    = flag.Int("repeat", 5, "rounds of the drains: each round runs every drain once, in rotated order; the report takes each drain's median")
	only      = flag.String("only", "", "run only the drains whose name contains this (a profiling aid; no report)")
	prof      = flag.String("cpuprofile", "", "write a CPU profile of the drains to this file")
	profWrite = flag.String("profile-write", "", "run only this write variant (-write-n transactions) under -cpuprofile (a profiling aid; no report)")
)

// walTable is the outbox table of the WAL mode handle (table mode uses
// outbox.DefaultTableName), so that each mode's relay reads its own.
const walTable = "outbox_wal"

// wmTopic is the watermill forwarder's topic; its table is watermill_<topic>.
const wmTopic = "forwarder_topic"

// env holds every handle of the run.
type env struct {
	pool     *pgxpool.Pool // raw loop, River, reads
	base     *gorm.DB      // the business writes without an outbox plugin
	sqlDB    *sql.DB       // base's pool (watermill, River's database/sql driver)
	tableDB  *gorm.DB      // gorm-outbox in table mode
	walDB    *gorm.DB      // gorm-outbox in WAL mode
	cpu      *serverCPU
	settings string
}

func main() {
	flag.Parse()
	log.SetFlags(0)
	if *dsn == "" {
		log.Fatal("bench: -dsn is required: run ./run.sh, which starts a throw-away server")
	}
	ctx := context.Background()
	e, err := setup(ctx)
	if err != nil {
		log.Fatalf("setup: %v", err)
	}
	if *only != "" {
		profileDrains(ctx, e)
		return
	}
	if *profWrite != "" {
		profileWrite(ctx, e)
		return
	}
	rep := &report{}
	began := time.Now()
	if rep.writes, err = e.writeRounds(ctx, *writeN, *rounds); err != nil {
		log.Fatalf("writes: %v", err)
	}
	if rep.drains, err = e.drainRounds(ctx, *relayN, *repeat); err != nil {
		log.Fatal(err)
	}
	for _, l := range latencies {
		res, err := e.latency(ctx, l, *latN, 2*time.Millisecond)
		if err != nil {
			log.Fatalf("%s: %v", l.name, err)
		}
		rep.latencies = append(rep.latencies, res)
	}
	rep.print(os.Stdout, e.settings, time.Since(began))
}

func gormConfig() *gorm.Config {
	return &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}
}

// open opens a GORM handle on its own pool, with plugin (nil: none).
func open(plugin *outbox.Plugin) (*gorm.DB, error) {
	db, err := gorm.Open(postgres.Open(*dsn), gormConfig())
	if err != nil {
		return nil, err
	}
	sqlDB, err := db.DB()
	if err != nil {
		return nil, err
	}
	sqlDB.SetMaxIdleConns(16) // database/sql keeps 2 idle: relays would reconnect
	if plugin != nil {
		if err := db.Use(plugin); err != nil {
			return nil, err
		}
	}
	return db, nil
}

func setup(ctx context.Context) (*env, error) {
	e := &env{}
	var err error
	if e.base, err = open(nil); err != nil {
		return nil, err
	}
	if e.sqlDB, err = e.base.DB(); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(*dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 16
	if e.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	if _, err := e.pool.Exec(ctx, schemaSQL); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(e.pool), &rivermigrate.Config{Logger: quietLogger()})
	if err != nil {
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return nil, fmt.Errorf("river migrate: %w", err)
	}
	sub, err := newWatermillSubscriber(e.sqlDB)
	if err != nil {
		return nil, err
	}
	if err := sub.SubscribeInitialize(wmTopic); err != nil {
		return nil, fmt.Errorf("watermill schema: %w", err)
	}
	if e.tableDB, err = open(&outbox.Plugin{AutoMigrate: true}); err != nil {
		return nil, fmt.Errorf("table mode: %w", err)
	}
	if e.walDB, err = open(&outbox.Plugin{TableName: walTable, AutoMigrate: true, WAL: &outbox.WAL{}}); err != nil {
		return nil, fmt.Errorf("WAL mode: %w", err)
	}
	if e.cpu, err = newServerCPU(*pgdata); err != nil {
		return nil, err
	}
	var ver, sync string
	_ = e.pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('synchronous_commit')`).Scan(&ver, &sync)
	e.settings = fmt.Sprintf("PostgreSQL %s (synchronous_commit %s, wal_level logical)", ver, sync)
	return e, nil
}

const schemaSQL = `
CREATE TABLE IF NOT EXISTS orders (
	id bigserial PRIMARY KEY,
	customer text NOT NULL,
	amount numeric NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS bench_outbox (
	id bigserial PRIMARY KEY,
	event_id uuid NOT NULL UNIQUE,
	type text NOT NULL,
	payload jsonb NOT NULL,
	status text NOT NULL DEFAULT 'pending',
	created_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS bench_outbox_pending_idx ON bench_outbox (id) WHERE status = 'pending';`

func newWatermillSubscriber(db *sql.DB) (*wmsql.Subscriber, error) {
	return wmsql.NewSubscriber(wmsql.BeginnerFromStdSQL(db), wmsql.SubscriberConfig{
		SchemaAdapter:  wmsql.DefaultPostgreSQLSchema{SubscribeBatchSize: 100},
		OffsetsAdapter: wmsql.DefaultPostgreSQLOffsetsAdapter{},
		PollInterval:   10 * time.Millisecond,
	}, watermill.NopLogger{})
}

// quietLogger keeps the libraries' logs to warnings, on stderr.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// profileDrains runs the drains named by -only, with a CPU profile when
// -cpuprofile is set.
func profileDrains(ctx context.Context, e *env) {
	for _, d := range drains {
		if strings.Contains(d.name, *only) {
			res, err := e.drain(ctx, d, *relayN)
			if err != nil {
				log.Fatalf("%s: %v", d.name, err)
			}
			fmt.Printf("%s: %.0f events/s, server CPU %.1f µs/event, client CPU %.1f µs/event\n", d.name, res.perSec(),
				res.serverCPU*1e6/float64(res.events), res.clientCPU*1e6/float64(res.events))
		}
	}
}

// profileWrite runs the write variant named by -profile-write.
func profileWrite(ctx context.Context, e *env) {
	vs, err := e.writeVariants()
	if err != nil {
		log.Fatal(err)
	}
	for _, v := range vs {
		if v.name != *profWrite {
			continue
		}
		f, err := os.Create(*prof)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
		t0 := time.Now()
		for i := range *writeN {
			if err := v.tx(ctx, i); err != nil {
				log.Fatal(err)
			}
		}
		fmt.Printf("%s: %.1f µs/tx\n", v.name, float64(time.Since(t0).Microseconds())/float64(*writeN))
	}
}

// startProfile starts the CPU profile of a timed drain under -only
// -cpuprofile, and returns what stops it.
func startProfile() func() {
	if *only == "" || *prof == "" {
		return func() {}
	}
	f, err := os.Create(*prof)
	if err != nil {
		log.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		log.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}
