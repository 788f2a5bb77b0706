package outboxredis

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/gormoutbox/outbox"
)

// Sentinel errors. Every error of these kinds that the package returns, or
// passes to an OnDead callback, wraps one of them: test with errors.Is.
var (
	// ErrInvalidOption is wrapped by every configuration error reported by
	// Validate (and so by relay.New and Run).
	ErrInvalidOption = errors.New("outboxredis: invalid option")

	// ErrMalformed is wrapped by the dead reason of a stream entry that is
	// not an outbox event: no "event" field, or one that is not a valid
	// CloudEvents envelope (then it wraps outbox.ErrInvalidEnvelope too).
	ErrMalformed = errors.New("outboxredis: malformed stream entry")

	// ErrTooManyDeliveries is wrapped by the dead reason of a message whose
	// handler ran WithMaxDeliveries times without success (runs and
	// deliveries that do not count left out: see WithMaxDeliveries).
	ErrTooManyDeliveries = errors.New("outboxredis: too many deliveries")

	// ErrRunning is returned by Run when the Consumer is already running.
	ErrRunning = errors.New("outboxredis: consumer already running")
)

// unavailablePrefixes are Redis error replies that say the server cannot
// serve writes for now, whatever the command: loading its dataset, busy
// with a script, failing over, short of replicas, or out of memory.
var unavailablePrefixes = []string{"LOADING ", "BUSY ", "MASTERDOWN ", "CLUSTERDOWN ", "READONLY ", "TRYAGAIN ", "NOREPLICAS ", "OOM "}

// isOutage reports whether err means that Redis cannot be reached or cannot
// serve for now, rather than that the command or its data is at fault.
//
// Observed with go-redis v9.23 against Redis 7: a connection cut by the
// server or a proxy surfaces (after go-redis's own retries) as a bare
// io.EOF; a refused dial as a *net.OpError wrapping ECONNREFUSED; a server
// that stops answering as an i/o timeout (a net.Error whose Timeout is
// true); a closed client as redis.ErrClosed. The end of the caller's
// context (context.DeadlineExceeded, itself a net.Error) is not an outage.
func isOutage(err error) bool {
	if err == nil {
		return false
	}
	var (
		opErr  *net.OpError
		netErr net.Error
	)
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrPoolExhausted),
		errors.As(err, &opErr):
		return true
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		// The caller's context ended (a net.Error too): not Redis's fault.
		return false
	case errors.As(err, &netErr):
		return true
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		if msg == "ERR max number of clients reached" {
			return true
		}
		for _, p := range unavailablePrefixes {
			if strings.HasPrefix(msg, p) {
				return true
			}
		}
	}
	return false
}

// classify marks an outage as outbox.Unavailable and leaves other errors
// as they are.
func classify(err error) error {
	if isOutage(err) {
		return outbox.Unavailable(err)
	}
	return err
}

// isNoGroup reports whether err is Redis's NOGROUP reply: the stream or
// its consumer group does not exist (deleted while the consumer ran).
func isNoGroup(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOGROUP ")
}
