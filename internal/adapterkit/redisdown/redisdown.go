// Package redisdown is the Redis part of the outage rule of package
// adapterkit, shared by the adapters that talk to Redis (outboxredis and
// outboxasynq, modules of their own that import it from the core module).
// It reads errors as text, and imports neither go-redis nor asynq, so that
// the core module does not require them.
package redisdown

import (
	"context"
	"regexp"
	"strings"

	"github.com/gormoutbox/outbox/internal/adapterkit"
)

// Outage is adapterkit.Outage for an error of a Redis command (of go-redis,
// or of asynq, which wraps them) made under ctx.
func Outage(ctx context.Context, err error) bool { return adapterkit.Outage(ctx, err, Down) }

// Down reports whether err is Redis's own way of saying that it cannot
// serve now: a closed client or an exhausted pool, a server that is
// loading, busy with a script, failing over, read-only, short of
// replicas, out of memory, full of clients, or refusing this client's
// credentials. None is the command's fault.
//
// It reads the error's text: go-redis's sentinel errors (redis.ErrClosed,
// ErrPoolTimeout, ErrPoolExhausted) and the server's error replies
// (LOADING, READONLY, …, which go-redis's IsLoadingError and its kin test
// by prefix too) are told by their messages, and asynq v0.26 flattens the
// error of its Lua scripts, which do the enqueue, into text ("UNKNOWN:
// redis eval error: EOF") anyway. The adapters' tests check go-redis's
// own values against it.
func Down(err error) bool {
	return textDown(err.Error())
}

// downTexts are the messages of connection failures, as go-redis and the
// net package spell them.
var downTexts = []string{
	"connection refused",
	"connection reset",
	"connection aborted",
	"broken pipe",
	"i/o timeout",
	"deadline exceeded",
	"use of closed network connection",
	"dial tcp",
	"dial unix",
	"failed to dial",
	"no route to host",
	"network is unreachable",
	"no such host",
	"redis: client is closed",
	"redis: connection pool",
	"max number of clients reached",
}

// downReplies are Redis error replies of a server that cannot take writes
// now or refuses this client.
var downReplies = regexp.MustCompile(`(?:^|: )(LOADING|READONLY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|BUSY|OOM|NOREPLICAS|NOAUTH|WRONGPASS)\b`)

// eof matches "EOF" and "unexpected EOF": the connection closed under the
// command.
var eof = regexp.MustCompile(`\bEOF\b`)

func textDown(msg string) bool {
	if downReplies.MatchString(msg) || eof.MatchString(msg) {
		return true
	}
	lower := strings.ToLower(msg)
	for _, t := range downTexts {
		if strings.Contains(lower, t) {
			return true
		}
	}
	return false
}
