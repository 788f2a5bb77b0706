package adapterkit

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"
)

// Outage reports whether err, returned by a call to a broker made under
// ctx, means that the broker is down (it cannot be reached, or cannot take
// the message now) rather than that the message is at fault. It is the
// rule documented on relay.Publisher:
//
//   - ctx ended before the broker answered (the relay's deadline, shortly
//     before its lease expires), or err is the end of a context
//     (context.DeadlineExceeded, context.Canceled): the broker was too
//     slow, the event is not at fault;
//   - err is a failure of the connection itself (Transport);
//   - broker, when not nil, says so: the broker's own errors and replies
//     that mean "not now" (a server loading, failing over, out of memory,
//     a client that is closed or reconnecting).
//
// A nil err is never an outage.
func Outage(ctx context.Context, err error, broker func(error) bool) bool {
	switch {
	case err == nil:
		return false
	case ctx != nil && ctx.Err() != nil,
		errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		Transport(err):
		return true
	}
	return broker != nil && broker(err)
}

// Transport reports whether err is the failure of a network connection:
// a net.Error (dial, read and write errors, timeouts), an end of stream
// under a command (io.EOF, io.ErrUnexpectedEOF), a closed connection, or
// a refused, reset or unreachable peer.
func Transport(err error) bool {
	var ne net.Error
	switch {
	case errors.As(err, &ne),
		errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed),
		errors.Is(err, syscall.ECONNREFUSED),
		errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.ECONNABORTED),
		errors.Is(err, syscall.EPIPE),
		errors.Is(err, syscall.EHOSTUNREACH),
		errors.Is(err, syscall.ENETUNREACH):
		return true
	}
	return false
}
