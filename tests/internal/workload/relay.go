package workload

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxasynq"
	"github.com/gormoutbox/outbox/adapters/outboxredis"
	"github.com/gormoutbox/outbox/relay"
	"github.com/gormoutbox/outbox/tests/internal/servers"
)

// Transports a relay publishes to.
const (
	Inproc = "inproc" // in-process handlers (the effect is written by the relay)
	Asynq  = "asynq"  // asynq tasks, handled by asynq servers
	Stream = "stream" // a Redis stream, read by a consumer group
)

// Queue and stream names on the throw-away Redis.
const (
	QueueName  = "faults"
	StreamName = "faults"
	GroupName  = "effects"
)

// RelayConfig describes one relay; it travels as JSON to a relay process.
type RelayConfig struct {
	Name        string
	Dialect     string
	DSN         string
	Transport   string
	RedisAddr   string
	Lease       time.Duration
	Poll        time.Duration
	Batch       int
	Concurrency int
	// Backoff is the delay after a failed attempt (doubling per attempt,
	// capped at 4×; default 200ms).
	Backoff time.Duration
	// Retention of published events (0: kept; the checks read them).
	Retention time.Duration
	Behavior  Behavior
	// LogLevel of the relay's log (default warn).
	LogLevel slog.Level
	// WAL opens the relay process's database in WAL mode (OpenWALDB).
	WAL bool
}

func (c *RelayConfig) defaults() {
	if c.Transport == "" {
		c.Transport = Inproc
	}
	if c.Lease == 0 {
		c.Lease = 5 * time.Second
	}
	if c.Poll == 0 {
		c.Poll = 100 * time.Millisecond
	}
	if c.Batch == 0 {
		c.Batch = 25
	}
	if c.Concurrency == 0 {
		c.Concurrency = 8
	}
	if c.Backoff == 0 {
		c.Backoff = 200 * time.Millisecond
	}
	if c.LogLevel == 0 && os.Getenv("OUTBOX_TEST_LOG") != "1" {
		c.LogLevel = slog.LevelWarn
	}
	c.Behavior.Worker = c.Name
}

// build makes the relay of cfg on db, and a function that releases its
// transport.
func build(cfg RelayConfig, db *gorm.DB, calls *Calls, log *slog.Logger) (*relay.Relay, func(), error) {
	var (
		pub   relay.Publisher
		close = func() {}
	)
	switch cfg.Transport {
	case Inproc:
		mux, err := NewMux(db, cfg.Behavior, calls, log)
		if err != nil {
			return nil, nil, err
		}
		pub = mux
	case Asynq:
		client := asynq.NewClientFromRedisClient(redis.NewClient(redisOptions(cfg.RedisAddr)))
		pub = outboxasynq.NewPublisher(client, outboxasynq.WithQueue(func(*outbox.Envelope) string { return QueueName }),
			outboxasynq.WithLogger(log))
		close = func() { _ = client.Close() }
	case Stream:
		rdb := redis.NewClient(redisOptions(cfg.RedisAddr))
		pub = outboxredis.NewStreamPublisher(rdb, outboxredis.WithDefaultStream(StreamName), outboxredis.WithLogger(log))
		close = func() { _ = rdb.Close() }
	default:
		return nil, nil, fmt.Errorf("unknown transport %q", cfg.Transport)
	}
	backoff := cfg.Backoff
	r, err := relay.New(db, withProbes(cfg.Name, db, pub),
		relay.WithWorkerID(fmt.Sprintf("%s-%d-%d", cfg.Name, os.Getpid(), time.Now().UnixNano()%1e6)),
		relay.WithLease(cfg.Lease), relay.WithPollInterval(cfg.Poll), relay.WithBatchSize(cfg.Batch),
		relay.WithConcurrency(cfg.Concurrency), relay.WithRetention(cfg.Retention), relay.WithHeartbeat(time.Second),
		relay.WithBackoff(func(attempt int) time.Duration { return backoff << min(max(attempt-1, 0), 2) }),
		relay.WithLogger(log))
	if err != nil {
		close()
		return nil, nil, err
	}
	return r, close, nil
}

func redisOptions(addr string) *redis.Options {
	return &redis.Options{Addr: addr, DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, MaxRetries: 1}
}

func newLogger(w io.Writer, lvl slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl}))
}

// Relay is a relay running in the test process.
type Relay struct {
	Name   string
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	Calls  *Calls
}

// StartRelay runs a relay on db in this process until Stop or the end of
// t, recording its handler calls in calls (nil: a record of its own). Its
// log goes to the test log when OUTBOX_TEST_LOG=1.
func StartRelay(t testing.TB, db *gorm.DB, cfg RelayConfig, calls *Calls) *Relay {
	t.Helper()
	cfg.defaults()
	var w io.Writer = io.Discard
	if os.Getenv("OUTBOX_TEST_LOG") == "1" {
		w = testWriter{t}
	}
	if calls == nil {
		calls = NewCalls()
	}
	r, closeFn, err := build(cfg, db, calls, newLogger(w, cfg.LogLevel).With("relay", cfg.Name))
	if err != nil {
		t.Fatalf("relay %s: %v", cfg.Name, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rl := &Relay{Name: cfg.Name, cancel: cancel, done: make(chan struct{}), Calls: calls}
	go func() {
		defer close(rl.done)
		defer closeFn()
		rl.err = r.Start(ctx)
	}()
	t.Cleanup(func() { rl.Stop() })
	return rl
}

// Running reports whether Start has not returned.
func (r *Relay) Running() bool {
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// Stop ends the relay and returns Start's error, or an error if Start
// has not returned within 30s (a wedged relay).
func (r *Relay) Stop() error {
	r.cancel()
	select {
	case <-r.done:
		return r.err
	case <-time.After(30 * time.Second):
		return fmt.Errorf("relay %s: Start did not return within 30s of the end of its context", r.Name)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// relayEnv carries a relay process's configuration.
const relayEnv = "OUTBOX_FAULTS_RELAY"

// RelayProc is a relay running in a process of its own: the test binary
// itself, started again with its configuration in the environment
// (TestMain calls RelayMain first).
type RelayProc struct {
	Name string
	*servers.Process
	log string
}

// SpawnRelay starts a relay process; it is killed when t ends. A data race
// reported in its log fails t.
func SpawnRelay(t testing.TB, cfg RelayConfig) *RelayProc {
	t.Helper()
	cfg.defaults()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), cfg.Name+".log")
	p := servers.Spawn(t, servers.Spec{Name: "relay " + cfg.Name, Path: exe, Args: []string{"-test.run=^$"},
		Env: []string{relayEnv + "=" + string(js)}, Log: log})
	rp := &RelayProc{Name: cfg.Name, Process: p, log: log}
	t.Cleanup(func() {
		if b, err := os.ReadFile(log); err == nil && strings.Contains(string(b), "DATA RACE") {
			t.Errorf("relay process %s reported a data race:\n%s", cfg.Name, servers.Tail(log, 80))
		}
	})
	return rp
}

// Log is the relay process's log file.
func (r *RelayProc) Log() string { return r.log }

// Terminate asks the relay to stop (SIGTERM) and waits for it; it reports
// whether it exited cleanly within timeout.
func (r *RelayProc) Terminate(timeout time.Duration) error {
	if err := r.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	if !r.Wait(timeout) {
		r.Kill()
		return fmt.Errorf("relay %s did not stop within %v of SIGTERM", r.Name, timeout)
	}
	return r.ExitErr()
}

// RelayMain runs a relay process when the environment says so, and exits;
// otherwise it returns at once. Call it first in TestMain.
func RelayMain() {
	js := os.Getenv(relayEnv)
	if js == "" {
		return
	}
	os.Exit(relayMain(js))
}

func relayMain(js string) int {
	QuietMySQL()
	var cfg RelayConfig
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "bad relay configuration:", err)
		return 2
	}
	log := newLogger(os.Stderr, cfg.LogLevel).With("relay", cfg.Name)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The database may be down (a scenario kills it): keep trying, as a
	// supervisor restarting the process would.
	var db *gorm.DB
	var err error
	for deadline := time.Now().Add(2 * time.Minute); ; {
		if cfg.WAL {
			db, err = OpenWALDB(cfg.DSN)
		} else {
			db, err = OpenDB(cfg.Dialect, cfg.DSN)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log.Error("opening the database", "error", err)
			return 2
		}
		time.Sleep(200 * time.Millisecond)
	}
	r, closeFn, err := build(cfg, db, nil, log)
	if err != nil {
		log.Error("building the relay", "error", err)
		return 2
	}
	defer closeFn()
	log.Info("relay process started", "pid", os.Getpid())
	if err := r.Start(ctx); err != nil {
		log.Error("relay stopped", "error", err)
		return 1
	}
	log.Info("relay process stopped")
	return 0
}
