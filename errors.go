package outbox

import (
	"errors"
	"fmt"
)

// Sentinel errors. Every error the package returns that belongs to one of
// these classes wraps it, so callers test with errors.Is.
var (
	// ErrInvalidEvent is wrapped by every validation failure of an Event.
	// The message names the offending field. Nothing is written for an
	// invalid event.
	ErrInvalidEvent = errors.New("outbox: invalid event")

	// ErrDuplicateEvent is returned when an Event.ID is emitted again with
	// content that differs from the row already stored under that ID.
	// Emitting the same ID with the same content is a no-op instead.
	ErrDuplicateEvent = errors.New("outbox: duplicate event id with different content")

	// ErrNotInTransaction is returned by Emit when tx does not run inside a
	// database transaction, so the event could not commit atomically with
	// the business rows, and by a statement whose transaction the plugin
	// could not open (see Plugin on SkipDefaultTransaction). Nothing is
	// written.
	ErrNotInTransaction = errors.New("outbox: not in a transaction")

	// ErrNotRegistered is returned when the outbox Plugin was not installed
	// with db.Use(&outbox.Plugin{}) on the *gorm.DB in use.
	ErrNotRegistered = errors.New("outbox: plugin not registered (call db.Use(&outbox.Plugin{}))")

	// ErrInvalidConfig is wrapped by configuration errors, such as an unsafe
	// table name given to Plugin.
	ErrInvalidConfig = errors.New("outbox: invalid configuration")
)

// invalid builds an ErrInvalidEvent error naming the field.
func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidEvent, field, fmt.Sprintf(format, args...))
}

// permanentError marks an error as not retryable.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// unavailableError marks an error as a transport outage.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return "unavailable: " + e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Permanent wraps err to say that delivering the event can never succeed:
// the relay marks the event dead at once, without further attempts.
// Permanent(nil) returns nil. The result still unwraps to err, and its
// message is err's prefixed with "permanent: ". An error already marked
// (IsPermanent, through any wrapping) is returned unchanged, so that the
// marker appears once in the message however often the error is marked on
// its way up.
func Permanent(err error) error {
	if err == nil || IsPermanent(err) {
		return err
	}
	return &permanentError{err: err}
}

// Unavailable wraps err to say that the transport is down (a broker or
// Redis outage), not that the event is at fault: the relay spends none of
// the event's attempts, releases the batch and backs off before claiming
// again. Unavailable(nil) returns nil. The result still unwraps to err, and
// its message is err's prefixed with "unavailable: ". An error already
// marked (IsUnavailable) is returned unchanged.
func Unavailable(err error) error {
	if err == nil || IsUnavailable(err) {
		return err
	}
	return &unavailableError{err: err}
}

// IsPermanent reports whether err, or any error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// IsUnavailable reports whether err, or any error it wraps, was marked with
// Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}
