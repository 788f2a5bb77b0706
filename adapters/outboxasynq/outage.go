package outboxasynq

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// redisDown reports whether err, returned by an asynq enqueue under ctx,
// means that Redis is unreachable or unable to take writes, rather than
// that the task is at fault.
//
// asynq v0.26 keeps the go-redis error in the chain for some commands (a
// dial error of its SADD is a *net.OpError), but flattens the error of its
// Lua scripts, which do the enqueue, into text: "UNKNOWN: redis eval
// error: EOF". So the types are checked first and the text after.
func redisDown(ctx context.Context, err error) bool {
	if err == nil {
		return false
	}
	if ctx.Err() != nil {
		// The caller's deadline (the relay's lease) or cancellation ended
		// the enqueue: Redis was too slow, the event is not at fault.
		return true
	}
	return typedOutage(err) || textOutage(err.Error())
}

func typedOutage(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne), // dial, read and write errors, timeouts
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout),
		errors.Is(err, redis.ErrPoolExhausted),
		redis.IsLoadingError(err),
		redis.IsReadOnlyError(err),
		redis.IsMasterDownError(err),
		redis.IsClusterDownError(err),
		redis.IsTryAgainError(err),
		redis.IsMaxClientsError(err),
		redis.IsOOMError(err):
		return true
	}
	return false
}

// outageTexts are the messages of connection failures, as go-redis and
// the net package spell them.
var outageTexts = []string{
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

// outageReplies are Redis error replies of a server that cannot take
// writes now (starting, failing over, out of memory, busy with a script)
// or refuses this client: none is the task's fault.
var outageReplies = regexp.MustCompile(`(?:^|: )(LOADING|READONLY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|BUSY|OOM|NOREPLICAS|NOAUTH|WRONGPASS)\b`)

// eof matches "EOF" and "unexpected EOF": the connection closed under the
// command.
var eof = regexp.MustCompile(`\bEOF\b`)

func textOutage(msg string) bool {
	if outageReplies.MatchString(msg) || eof.MatchString(msg) {
		return true
	}
	lower := strings.ToLower(msg)
	for _, t := range outageTexts {
		if strings.Contains(lower, t) {
			return true
		}
	}
	return false
}
