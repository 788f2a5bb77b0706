package redisdown

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
)

// go-redis's sentinel errors, by their messages (go-redis v9): the
// adapters' tests check its own values.
var (
	errClosed      = errors.New("redis: client is closed")
	errPoolTimeout = errors.New("redis: connection pool timeout")
)

func TestOutageOfAsynqErrors(t *testing.T) {
	opErr := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "refused"}}
	down := []error{
		// What asynq v0.26 returned in TestRedisOutageIsUnavailable and the
		// probes it was written from: its Lua scripts flatten the error.
		errors.New("UNKNOWN: redis eval error: EOF"),
		errors.New("UNKNOWN: redis eval error: unexpected EOF"),
		errors.New("UNKNOWN: redis eval error: context deadline exceeded"),
		errors.New("UNKNOWN: redis eval error: redis: client is closed"),
		errors.New("UNKNOWN: redis eval error: read tcp 127.0.0.1:5->127.0.0.1:6379: read: connection reset by peer"),
		errors.New("UNKNOWN: redis eval error: write tcp 127.0.0.1:5->127.0.0.1:6379: write: broken pipe"),
		errors.New("UNKNOWN: redis eval error: dial tcp 127.0.0.1:6379: connect: connection refused"),
		errors.New("UNKNOWN: redis eval error: i/o timeout"),
		errors.New("UNKNOWN: redis eval error: redis: connection pool timeout"),
		errors.New("UNKNOWN: redis eval error: LOADING Redis is loading the dataset in memory"),
		errors.New("UNKNOWN: redis eval error: READONLY You can't write against a read only replica."),
		errors.New("UNKNOWN: redis eval error: OOM command not allowed when used memory > 'maxmemory'."),
		errors.New("UNKNOWN: redis eval error: BUSY Redis is busy running a script."),
		errors.New("UNKNOWN: redis eval error: NOAUTH Authentication required."),
		errors.New("UNKNOWN: redis eval error: ERR max number of clients reached"),
		// Typed: asynq keeps the chain of its SADD.
		fmt.Errorf("UNKNOWN: redis command error: SADD failed: %w", opErr),
		fmt.Errorf("x: %w", syscall.ECONNREFUSED),
		fmt.Errorf("x: %w", io.EOF),
		fmt.Errorf("x: %w", errClosed),
		fmt.Errorf("x: %w", errPoolTimeout),
		fmt.Errorf("x: %w", context.DeadlineExceeded),
	}
	for _, err := range down {
		if !Outage(context.Background(), err) {
			t.Errorf("not classified as an outage: %v", err)
		}
	}
	ordinary := []error{
		errors.New("UNKNOWN: redis eval error: WRONGTYPE Operation against a key holding the wrong kind of value"),
		errors.New("UNKNOWN: redis eval error: ERR Error running script (call to f_x): @user_script:1: oops"),
		errors.New("INTERNAL_ERROR: unexpected return value from Lua script: foo"),
		errors.New("task typename cannot be empty"),
		errors.New("queue name must contain one or more characters"),
		errors.New("UNKNOWN: redis eval error: ERR unknown command 'EVALSHA', reopen" /* mentions no outage */),
		errors.New("the GEOFENCE type is unknown"), // EOF inside a word
	}
	for _, err := range ordinary {
		if Outage(context.Background(), err) {
			t.Errorf("classified as an outage: %v", err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if !Outage(ctx, errors.New("anything")) {
		t.Error("an error after the caller's context ended is not the event's fault")
	}
}

// redisErr is an error reply of the server, as go-redis returns it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestOutageOfGoRedisErrors(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		{fmt.Errorf("XADD: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{errClosed, true},
		{errPoolTimeout, true},
		{redisErr("LOADING Redis is loading the dataset in memory"), true},
		{redisErr("ERR max number of clients reached"), true},
		{redisErr("OOM command not allowed when used memory > 'maxmemory'."), true},
		{redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisErr("ERR syntax error"), false},
		{context.DeadlineExceeded, true}, // the rule of relay.Publisher: the broker did not answer in time
		{errors.New("boom"), false},
		{nil, false},
	}
	for _, c := range cases {
		if got := Outage(context.Background(), c.err); got != c.want {
			t.Errorf("Outage(context.Background(), %v) = %v, want %v", c.err, got, c.want)
		}
	}
}
