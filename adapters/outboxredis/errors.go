package outboxredis

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
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

	// ErrNotReplicated is wrapped (inside outbox.Unavailable) by the
	// result of an event whose entry fewer replicas than WithWaitReplicas
	// asks for acknowledged in time.
	ErrNotReplicated = errors.New("outboxredis: entry not replicated in time")

	// ErrRunning is returned by Run when the Consumer is already running.
	ErrRunning = errors.New("outboxredis: consumer already running")
)

// isNoGroup reports whether err is Redis's NOGROUP reply: the stream or
// its consumer group does not exist (deleted while the consumer ran).
func isNoGroup(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOGROUP ")
}
