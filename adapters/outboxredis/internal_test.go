package outboxredis

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
)

// redisErr is an error reply of the server, as go-redis returns it.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestIsOutage(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{io.EOF, true},
		{fmt.Errorf("XADD: %w", io.ErrUnexpectedEOF), true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{redis.ErrClosed, true},
		{redis.ErrPoolTimeout, true},
		{redisErr("LOADING Redis is loading the dataset in memory"), true},
		{redisErr("ERR max number of clients reached"), true},
		{redisErr("OOM command not allowed when used memory > 'maxmemory'."), true},
		{redisErr("WRONGTYPE Operation against a key holding the wrong kind of value"), false},
		{redisErr("ERR syntax error"), false},
		{context.DeadlineExceeded, false},
		{errors.New("boom"), false},
		{nil, false},
	}
	for _, c := range cases {
		if got := isOutage(c.err); got != c.want {
			t.Errorf("isOutage(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	cases := map[string]bool{"8.6.0": true, "8.6": true, "8.10.1": true, "9.0.0": true, "8.5.9": false, "7.0.15": false, "": false, "x.y": false}
	for v, want := range cases {
		if got := versionAtLeast(v, 8, 6); got != want {
			t.Errorf("versionAtLeast(%q) = %v", v, got)
		}
	}
	if got := infoField("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "redis_version"); got != "7.0.15" {
		t.Errorf("infoField = %q", got)
	}
}

func TestSlotKeySharesTheStreamsSlot(t *testing.T) {
	cases := map[string]string{
		"orders":        "{orders}:x",
		"{shop}:orders": "{shop}:orders:x",
		"a{}b":          "a{}b:x", // no valid tag: another slot
		"a}b":           "a}b:x",
	}
	for stream, want := range cases {
		if got := slotKey(stream, ":x"); got != want {
			t.Errorf("slotKey(%q) = %q, want %q", stream, got, want)
		}
	}
}
