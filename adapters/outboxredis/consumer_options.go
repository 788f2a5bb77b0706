package outboxredis

import (
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/gormoutbox/outbox/consume"
)

// Defaults of the consumer's own options.
const (
	DefaultStartID = "0"
	DefaultBlock   = 2 * time.Second
	DefaultCount   = 10
	DefaultMinIdle = time.Minute
)

// consumerConfig holds the consumer's own options.
type consumerConfig struct {
	startID       string
	block         time.Duration
	count         int64
	minIdle       time.Duration
	claimInterval time.Duration
	keyOrder      bool
	deadStream    string
}

var entryID = regexp.MustCompile(`^[0-9]+(-[0-9]+)?$`)

// option makes a consumer option of this package.
func option(name string, f func(c *consumerConfig) error) consume.Option {
	return consume.TransportOption("outboxredis."+name, f)
}

// atLeast checks a duration option.
func atLeast(what string, d, least time.Duration) error {
	if d < least {
		return fmt.Errorf("%s %v is shorter than %v", what, d, least)
	}
	return nil
}

// WithStartID sets where a consumer group created by Run starts reading:
// "0" (the default) delivers every entry already in the stream, "$" only
// entries added afterwards, or an entry id. An existing group keeps its
// position.
func WithStartID(id string) consume.Option {
	return option("WithStartID", func(c *consumerConfig) error {
		if id != "$" && !entryID.MatchString(id) {
			return fmt.Errorf("start id %q is neither \"$\" nor an entry id", id)
		}
		c.startID = id
		return nil
	})
}

// WithBlock sets how long one XREADGROUP waits for new entries (default
// 2s, 1ms to 1 minute). Run notices the end of its context only between
// reads, so it returns up to this long after the context ends.
func WithBlock(d time.Duration) consume.Option {
	return option("WithBlock", func(c *consumerConfig) error {
		if d < time.Millisecond || d > time.Minute {
			return fmt.Errorf("block %v is not between 1ms and 1m", d)
		}
		c.block = d
		return nil
	})
}

// WithCount sets how many entries one read or claim takes (default 10, 1
// to 10000). Entries taken are kept from being adopted by another
// consumer while they wait (see the package documentation), however long
// the batch takes.
func WithCount(n int) consume.Option {
	return option("WithCount", func(c *consumerConfig) error {
		if n < 1 || n > 10000 {
			return fmt.Errorf("count %d is not between 1 and 10000", n)
		}
		c.count = int64(n)
		return nil
	})
}

// WithMinIdle sets how long a message must have been pending, not kept by
// the consumer of the group that holds it, before this one adopts it with
// XAUTOCLAIM (default 1 minute, at least 1ms): the time after which a
// consumer is presumed dead. A running consumer resets the idle time of
// the messages it holds every third of it (see the package
// documentation). It is also the default of consume.WithHandlerTimeout.
func WithMinIdle(d time.Duration) consume.Option {
	return option("WithMinIdle", func(c *consumerConfig) error {
		c.minIdle = d
		return atLeast("min idle", d, time.Millisecond)
	})
}

// WithClaimInterval sets how often the consumer looks for messages to
// adopt, and for pending messages of its own that it does not know of
// (left by an earlier run under its name), to retry (default half the
// shortest of the min idle time, consume.WithRetryDelay and 20s). Messages
// it retries itself are taken again when their delay has passed.
func WithClaimInterval(d time.Duration) consume.Option {
	return option("WithClaimInterval", func(c *consumerConfig) error {
		c.claimInterval = d
		return atLeast("claim interval", d, time.Millisecond)
	})
}

// WithDeadLetterStream appends every dead message to stream before it is
// acknowledged: its fields, plus FieldDeadReason, FieldDeadStream,
// FieldDeadEntryID, FieldDeadGroup and FieldDeadDeliveries. The default is
// none: a dead message is then only acknowledged, logged and passed to
// consume.WithOnDead. NewDeadLetters reads the stream (and replays it).
func WithDeadLetterStream(stream string) consume.Option {
	return option("WithDeadLetterStream", func(c *consumerConfig) error {
		if stream == "" {
			return errors.New("empty dead-letter stream")
		}
		c.deadStream = stream
		return nil
	})
}

// WithKeyOrder makes the consumer handle the events of one partition key
// one at a time, in the order they were appended, across all the
// consumers of its group (each of which must use it): an entry that names
// its predecessor (FieldAfter, written by a StreamPublisher WithKeyChain)
// waits, pending and uncounted, until that predecessor is no longer
// pending in the group, that is, until it was handled or went dead.
// Entries of other keys, and entries without a predecessor, are handled
// as they come. The waiting entries are looked at again, the lowest first,
// every 100ms (or the retry delay, if shorter) and at once after the
// consumer acknowledged one.
//
// The cost: one XPENDING per keyed entry; a key whose entry fails waits
// for its retries (consume.WithRetryDelay) and, if it goes dead, for its
// dead letter; and a consumer that dies holding an entry holds up its key
// until another consumer adopts it (WithMinIdle). See the package
// documentation.
func WithKeyOrder() consume.Option {
	return option("WithKeyOrder", func(c *consumerConfig) error { c.keyOrder = true; return nil })
}
