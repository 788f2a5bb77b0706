package servers

import (
	"context"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a throw-away redis-server.
type Redis struct {
	Port int
	proc *Process
}

// RedisPersistence says what a Redis keeps across a kill.
type RedisPersistence int

const (
	// AOFAlways appends every write to the AOF and fsyncs it before
	// replying: a SIGKILL loses nothing that was acknowledged.
	AOFAlways RedisPersistence = iota
	// NoPersistence keeps nothing: a restart starts empty.
	NoPersistence
)

// StartRedis starts a server and kills it when t ends. It skips t, or fails
// it under OUTBOX_REQUIRE_SERVICES=1, when redis-server is missing.
func StartRedis(t testing.TB, persist RedisPersistence, opts ...Option) *Redis {
	t.Helper()
	path := Need(t, "redis-server")[0]
	o := options(opts)
	root := serverDir(t, "redis")
	r := &Redis{Port: FreePort(t)}
	args := []string{"--port", strconv.Itoa(r.Port), "--bind", "127.0.0.1", "--dir", root,
		"--daemonize", "no", "--protected-mode", "no", "--save", ""}
	switch persist {
	case AOFAlways:
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	case NoPersistence:
		args = append(args, "--appendonly", "no")
	}
	r.proc = Spawn(t, Spec{Name: "redis-server", Path: path, Args: append(args, o.args...), Env: o.env,
		Log: filepath.Join(root, "redis.log"), Dir: root})
	if err := r.waitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	return r
}

// Addr is host:port.
func (r *Redis) Addr() string { return "127.0.0.1:" + strconv.Itoa(r.Port) }

// Process is the redis-server process.
func (r *Redis) Process() *Process { return r.proc }

// waitReady waits for PONG: after a restart Redis answers LOADING until it
// has replayed its AOF.
func (r *Redis) waitReady(timeout time.Duration) error {
	return waitFor(r.proc, timeout, func() error {
		c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1, DialTimeout: time.Second})
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return c.Ping(ctx).Err()
	})
}

// Crash kills the server with SIGKILL and waits for it to exit.
func (r *Redis) Crash(t testing.TB) {
	t.Helper()
	if err := r.proc.SignalGroup(syscall.SIGKILL); err != nil {
		t.Fatalf("killing redis-server: %v", err)
	}
	r.proc.Wait(30 * time.Second)
}

// Restart starts the server again after Crash and waits for PONG.
func (r *Redis) Restart(t testing.TB) {
	t.Helper()
	if err := r.proc.Start(); err != nil {
		t.Fatalf("restarting redis-server: %v", err)
	}
	if err := r.waitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}
