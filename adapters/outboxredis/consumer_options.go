package outboxredis

import (
	"context"
	"regexp"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Defaults of the consumer options.
const (
	DefaultStartID       = "0"
	DefaultBlock         = 2 * time.Second
	DefaultCount         = 10
	DefaultMinIdle       = time.Minute
	DefaultRetryDelay    = 5 * time.Second
	DefaultMaxDeliveries = 10
)

type consumerConfig struct {
	startID        string
	block          time.Duration
	count          int64
	minIdle        time.Duration
	claimInterval  time.Duration
	retryDelay     time.Duration
	handlerTimeout time.Duration
	maxDeliveries  int64
	keyOrder       bool
	deadStream     string
	onDead         func(ctx context.Context, d DeadMessage)
	tracerProvider trace.TracerProvider
	common
}

var entryID = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

// WithStartID sets where a consumer group created by Run starts reading:
// "0" (the default) delivers every entry already in the stream, "$" only
// entries added afterwards, or an entry id. An existing group keeps its
// position.
func WithStartID(id string) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if id != "$" && !entryID.MatchString(id) {
			c.Fail("start id %q is neither \"$\" nor an entry id", id)
		}
		c.startID = id
	})
}

// WithBlock sets how long one XREADGROUP waits for new entries (default
// 2s, 1ms to 1 minute). Run notices the end of its context only between
// reads, so it returns up to this long after the context ends.
func WithBlock(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < time.Millisecond || d > time.Minute {
			c.Fail("block %v is not between 1ms and 1m", d)
		}
		c.block = d
	})
}

// WithCount sets how many entries one read or claim takes (default 10, 1
// to 10000). Entries taken are handled one at a time, and kept from
// being adopted by another consumer while they wait (see the package
// documentation), however long the batch takes.
func WithCount(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 || n > 10000 {
			c.Fail("count %d is not between 1 and 10000", n)
		}
		c.count = int64(n)
	})
}

// WithMinIdle sets how long a message must have been pending, unacknowledged
// by another consumer of the group, before this one claims it with
// XAUTOCLAIM (default 1 minute, at least 1ms): the time after which a
// consumer is presumed dead. A running consumer resets the idle time of
// the messages it holds every third of it, the one being handled included
// (see the package documentation). It is also the default handler
// timeout.
func WithMinIdle(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < time.Millisecond {
			c.Fail("min idle %v is shorter than 1ms", d)
		}
		c.minIdle = d
	})
}

// WithClaimInterval sets how often the consumer looks for messages to claim
// or retry (default half the shortest of the min idle time, the retry delay
// and 20s).
func WithClaimInterval(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < time.Millisecond {
			c.Fail("claim interval %v is shorter than 1ms", d)
		}
		c.claimInterval = d
	})
}

// WithRetryDelay sets how long a message whose handler failed stays
// pending before this consumer delivers it again (default 5s, at least
// 1ms). Another consumer may take it over after the min idle time.
func WithRetryDelay(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < time.Millisecond {
			c.Fail("retry delay %v is shorter than 1ms", d)
		}
		c.retryDelay = d
	})
}

// WithHandlerTimeout bounds each handler run: its context ends after d
// (default: the min idle time, after which another consumer may claim the
// message). The handler's context does not end with Run's: Run finishes
// the message in hand before it returns.
func WithHandlerTimeout(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < time.Millisecond {
			c.Fail("handler timeout %v is shorter than 1ms", d)
		}
		c.handlerTimeout = d
	})
}

// WithMaxDeliveries sets how many times a message's handler runs at most
// (default 10, at least 1). Delivered once more, by a retry or a claim,
// it is dead without running the handler: acknowledged, logged at error
// level, added to the dead-letter stream if any, and passed to the OnDead
// callback. Runs that end in outbox.Unavailable or
// idempotency.ErrInProgress, and deliveries that never reached the
// handler, do not count; a delivery cut short by a crash of its consumer
// does (see the package documentation).
func WithMaxDeliveries(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 {
			c.Fail("max deliveries %d is less than 1", n)
		}
		c.maxDeliveries = int64(n)
	})
}

// WithDeadLetterStream appends every dead message to stream before it is
// acknowledged: its fields, plus "dead_reason", "dead_stream",
// "dead_entry_id", "dead_group" and "dead_deliveries". The default is none.
func WithDeadLetterStream(stream string) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if stream == "" {
			c.Fail("empty dead-letter stream")
		}
		c.deadStream = stream
	})
}

// WithOnDead calls fn once for every dead message, after it is
// acknowledged. fn runs in the consumer's loop: keep it short.
func WithOnDead(fn func(ctx context.Context, d DeadMessage)) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if fn == nil {
			c.Fail("nil OnDead callback")
		}
		c.onDead = fn
	})
}

// WithTracerProvider sets where consumer spans are created (default
// otel.GetTracerProvider(), looked up when the Consumer is made).
func WithTracerProvider(tp trace.TracerProvider) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if tp == nil {
			c.Fail("nil tracer provider")
		}
		c.tracerProvider = tp
	})
}

// WithKeyOrder makes the consumer handle the events of one partition key
// one at a time, in the order they were appended, across all the
// consumers of its group (each of which must use it): an entry that names
// its predecessor (FieldAfter, written by a StreamPublisher
// WithKeyChain) waits, pending and uncounted, until that predecessor is no
// longer pending in the group, that is, until it was handled or went dead.
// Entries of other keys, and entries without a predecessor, are handled
// as they come. A waiting entry is checked again every 100ms (or the
// retry delay, if shorter) while the consumer runs.
//
// The cost: one XPENDING per keyed entry; a key whose entry fails waits
// for its retries (WithRetryDelay) and, if it goes dead, for its dead
// letter; and a consumer that dies holding an entry holds up its key until
// another consumer adopts it (WithMinIdle). See the package documentation.
func WithKeyOrder() ConsumerOption {
	return consumerOption(func(c *consumerConfig) { c.keyOrder = true })
}
