package outbox

import (
	"errors"
	"fmt"
	"time"
)

// snoozeError asks for a later delivery without spending an attempt.
type snoozeError struct {
	err   error
	after time.Duration
}

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %v: %v", e.after, e.err) }
func (e *snoozeError) Unwrap() error { return e.err }

// Snooze wraps err to say that the event cannot be handled yet, through no
// fault of its own or of the transport, and should be delivered again
// after the delay: for example, an idempotency key another delivery of the
// event still holds (idempotency.ErrInProgress). The relay hands the event
// back without spending an attempt, to be claimed again after the delay;
// the rest of the batch and the relay's pace are unaffected (unlike
// Unavailable, which makes the relay back off). Events later in the same
// PartitionKey wait for it. A negative delay counts as zero.
//
// An event snoozed on every delivery is never dead: snooze only for a
// condition that ends. Snooze(nil, d) returns nil. The result still unwraps
// to err.
func Snooze(err error, after time.Duration) error {
	if err == nil {
		return nil
	}
	return &snoozeError{err: err, after: max(after, 0)}
}

// SnoozeDelay reports whether err, or any error it wraps, was marked with
// Snooze, and the delay it asked for (the outermost mark's).
func SnoozeDelay(err error) (time.Duration, bool) {
	var s *snoozeError
	if !errors.As(err, &s) {
		return 0, false
	}
	return s.after, true
}
