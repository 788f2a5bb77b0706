package outboxredis

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors of the publisher: test with errors.Is. The consumer's
// are consume's (consume.ErrInvalidOption, consume.ErrMalformed,
// consume.ErrTooManyDeliveries).
var (
	// ErrInvalidOption is wrapped by every configuration error a
	// StreamPublisher's Validate reports (and so relay.New).
	ErrInvalidOption = errors.New("outboxredis: invalid option")

	// ErrNotReplicated is wrapped (inside outbox.Unavailable) by the
	// result of an event whose entry fewer replicas than WithWaitReplicas
	// asks for acknowledged in time.
	ErrNotReplicated = errors.New("outboxredis: entry not replicated in time")
)

// isNoGroup reports whether err is Redis's NOGROUP reply: the stream or
// its consumer group does not exist (deleted while the consumer ran).
func isNoGroup(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && strings.HasPrefix(rerr.Error(), "NOGROUP ")
}
