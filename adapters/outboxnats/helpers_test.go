package outboxnats_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/adapters/outboxnats"
	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/idempotency"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// natsEnv names the NATS server (JetStream on) the tests use.
const natsEnv = "OUTBOX_NATS_URL"

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testLogger logs to the test output with OUTBOX_TEST_LOG=1, else nowhere.
func testLogger(t testing.TB) *slog.Logger { return testenv.Logger(t) }

// natsURL returns OUTBOX_NATS_URL, skipping (or failing, under
// OUTBOX_REQUIRE_SERVICES=1) without it.
func natsURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv(natsEnv)
	if url == "" {
		testenv.Unavailable(t, natsEnv, "nats://127.0.0.1:4222")
	}
	return url
}

// connect opens a connection that reconnects for ever, closed when t ends.
func connect(t testing.TB, url string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(100 * time.Millisecond), nats.Name(t.Name())}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connecting to NATS at %s: %v (is the server running?)", url, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// newJS connects to the test server and returns its JetStream.
func newJS(t testing.TB, opts ...jetstream.JetStreamOpt) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(connect(t, natsURL(t)), opts...)
	must(t, err)
	return js
}

// newStream creates a stream with a unique name capturing "<name>.>",
// deleted when t ends; tweak adjusts its configuration. It returns the
// name, which is also the subject prefix without its dot.
func newStream(t testing.TB, js jetstream.JetStream, tweak ...func(*jetstream.StreamConfig)) string {
	t.Helper()
	name := testenv.Name("on")
	cfg := jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.FileStorage, Duplicates: 10 * time.Minute}
	for _, f := range tweak {
		f(&cfg)
	}
	name = cfg.Name
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		t.Fatalf("creating stream %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Errorf("deleting stream %s: %v", name, err)
		}
	})
	return name
}

// streamMsgs returns how many messages the stream holds.
func streamMsgs(t testing.TB, js jetstream.JetStream, stream string) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), stream)
	must(t, err)
	info, err := s.Info(context.Background())
	must(t, err)
	return info.State.Msgs
}

// newPublisher returns a Publisher of js, failing t on an error.
func newPublisher(t testing.TB, js jetstream.JetStream, opts ...outboxnats.Option) *outboxnats.Publisher {
	t.Helper()
	p, err := outboxnats.NewPublisher(js, append([]outboxnats.Option{outboxnats.WithLogger(testLogger(t))}, opts...)...)
	must(t, err)
	return p
}

// consumerOpts are fast settings for tests.
func consumerOpts(t testing.TB, more ...consume.Option) []consume.Option {
	return append([]consume.Option{
		consume.WithLogger(testLogger(t)),
		outboxnats.WithFetchWait(100 * time.Millisecond),
		consume.WithRetryDelay(50 * time.Millisecond), consume.WithMaxRetryDelay(200 * time.Millisecond),
	}, more...)
}

// run starts c.Run and returns a function that stops it and checks that
// it returned nil; the function also runs when t ends.
func run(t testing.TB, c *consume.Consumer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run returned %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Error("Run did not return within 30s of its context's end")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// setupDB installs the outbox and an idempotency store on db.
func setupDB(t testing.TB, db *gorm.DB) (*gorm.DB, *idempotency.Store) {
	t.Helper()
	must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
	store, err := idempotency.NewStore(db)
	must(t, err)
	must(t, store.Migrate(context.Background()))
	return db, store
}

func countStatus(t testing.TB, db *gorm.DB, s outbox.Status) int64 {
	t.Helper()
	var n int64
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", string(s)).Count(&n).Error)
	return n
}

// waitFor polls cond every 20ms until it holds, failing t after timeout.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// counters counts calls per event id.
type counters struct{ m sync.Map }

func (c *counters) inc(id string) int32 {
	v, _ := c.m.LoadOrStore(id, new(atomic.Int32))
	return v.(*atomic.Int32).Add(1)
}

func (c *counters) get(id string) int32 {
	if v, ok := c.m.Load(id); ok {
		return v.(*atomic.Int32).Load()
	}
	return 0
}

func eventID(i int) string { return fmt.Sprintf("ev-%05d", i) }

// envelope returns an envelope as the relay hands it to a publisher.
func envelope(id, topic string) *outbox.Envelope {
	return &outbox.Envelope{ID: id, Type: "test.event", Topic: topic, Attempt: 1,
		Payload: []byte(`{"n":1}`), CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
}

// server is a throw-away nats-server with JetStream, for tests that stop
// and start their broker: the shared server is never stopped.
type server struct {
	t    testing.TB
	port int
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startServer starts nats-server on a free port, its store in a temporary
// directory, with args added to its command line ("-js" turns JetStream
// on); it is stopped when t ends.
func startServer(t testing.TB, args ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		if testenv.Required() {
			t.Fatalf("nats-server is not on PATH: %v", err)
		}
		t.Skipf("nats-server is not on PATH: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	must(t, ln.Close())
	s := &server{t: t, port: port, dir: t.TempDir(), args: args}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// URL is the server's client URL.
func (s *server) URL() string { return "nats://127.0.0.1:" + strconv.Itoa(s.port) }

// start runs the server and waits until it accepts connections.
func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command("nats-server", append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(s.port), "-sd", s.dir}, s.args...)...)
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	must(s.t, s.cmd.Start())
	deadline := time.Now().Add(15 * time.Second)
	for {
		nc, err := nats.Connect(s.URL(), nats.Timeout(time.Second))
		if err == nil {
			nc.Close()
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("nats-server on port %d did not start: %v", s.port, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the server (SIGTERM, then SIGKILL after 10s) and waits for it.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s.cmd = nil
}

type atomicInt = atomic.Int64
