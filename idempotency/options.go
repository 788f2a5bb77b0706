package idempotency

import (
	"time"

	"github.com/gormoutbox/outbox/internal/dialect"
	"github.com/gormoutbox/outbox/internal/optionerr"
)

// Option configures a Store. A bad option is reported by NewStore (and
// Migrate), every one of them, joined, each wrapping ErrInvalidOption.
type Option func(*options)

type options struct {
	table string
	ttl   time.Duration
	lease time.Duration
	optionerr.Errors
}

// applyOptions returns the defaults changed by opts, or the joined errors
// of the bad ones.
func applyOptions(opts []Option) (options, error) {
	o := options{table: DefaultTableName, ttl: DefaultTTL, lease: DefaultLease,
		Errors: optionerr.Errors{Sentinel: ErrInvalidOption}}
	for _, opt := range opts {
		if opt == nil {
			o.Fail("nil option")
			continue
		}
		opt(&o)
	}
	return o, o.Err()
}

// WithTable sets the table (default DefaultTableName); it must be a plain
// SQL identifier.
func WithTable(name string) Option {
	return func(o *options) {
		if err := dialect.CheckIdent(name, 63); err != nil {
			o.Fail("table: %v", err)
		}
		o.table = name
	}
}

// WithTTL sets how long a succeeded key is remembered (default 7 days).
// Keep it longer than any redelivery could come: a key purged after its
// TTL runs again. Purge deletes expired records.
func WithTTL(d time.Duration) Option {
	return func(o *options) {
		if d < time.Second {
			o.Fail("TTL %v is shorter than 1s", d)
		}
		o.ttl = d
	}
}

// WithLease sets how long a running Do or SideEffect holds its key before
// another caller may take it over, assuming the holder died (default 5
// minutes). Keep it longer than fn takes.
func WithLease(d time.Duration) Option {
	return func(o *options) {
		if d < time.Second {
			o.Fail("lease %v is shorter than 1s", d)
		}
		o.lease = d
	}
}
