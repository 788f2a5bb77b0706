package outboxnats

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the consumer options.
const (
	// DefaultBatch is how many messages one fetch asks for (WithBatch).
	DefaultBatch = 10
	// DefaultFetchWait is how long one fetch waits for messages
	// (WithFetchWait).
	DefaultFetchWait = 2 * time.Second
	// DefaultAckWait is the durable consumer's AckWait and the handler
	// timeout (WithAckWait).
	DefaultAckWait = 30 * time.Second
	// DefaultMaxDeliveries is how many counted handler runs a message
	// gets (WithMaxDeliveries).
	DefaultMaxDeliveries = 10
	// DefaultRetryDelay is the delay after a first failed attempt, and
	// DefaultMaxRetryDelay the longest one (WithRetryDelay).
	DefaultRetryDelay    = time.Second
	DefaultMaxRetryDelay = time.Minute
)

type consumerConfig struct {
	filterSubject  string
	batch          int
	fetchWait      time.Duration
	ackWait        time.Duration
	handlerTimeout time.Duration
	maxDeliveries  int
	retryDelay     time.Duration
	maxRetryDelay  time.Duration
	deadSubject    string
	onDead         func(ctx context.Context, d DeadMessage)
	configure      func(*jetstream.ConsumerConfig)
	tracerProvider trace.TracerProvider
	common
}

// WithFilterSubject makes the durable consumer take only the messages of
// the stream whose subject matches filter (wildcards allowed), such as
// "shop.orders" or "shop.>". The default is every message of the stream.
func WithFilterSubject(filter string) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if filter == "" {
			c.Fail("empty filter subject")
		}
		c.filterSubject = filter
	})
}

// WithBatch sets how many messages one fetch asks for (default 10, 1 to
// 10000). They are handled one at a time, in order; while the consumer
// holds them (waiting behind earlier ones, or running) it marks each in
// progress every third of the ack wait, so that none is delivered to
// another consumer of the durable meanwhile, however long the batch
// takes.
func WithBatch(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 || n > 10000 {
			c.Fail("batch %d is not between 1 and 10000", n)
		}
		c.batch = n
	})
}

// WithFetchWait sets how long one fetch waits for messages (default 2s,
// 10ms to 1 minute). Run notices the end of its context between fetches,
// so it returns up to this long after the context ends.
func WithFetchWait(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < 10*time.Millisecond || d > time.Minute {
			c.Fail("fetch wait %v is not between 10ms and 1m", d)
		}
		c.fetchWait = d
	})
}

// WithAckWait sets the durable consumer's AckWait (default 30s, at least
// 1s): a message not acknowledged this long after its delivery is
// delivered again, to this consumer or another of the same durable. It is
// also the default handler timeout.
func WithAckWait(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < time.Second {
			c.Fail("ack wait %v is shorter than 1s", d)
		}
		c.ackWait = d
	})
}

// WithHandlerTimeout bounds each handler run: its context ends after d
// (default: the ack wait, after which the server delivers the message
// again). The handler's context does not end with Run's: Run finishes the
// message in hand before it returns.
func WithHandlerTimeout(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < time.Millisecond {
			c.Fail("handler timeout %v is shorter than 1ms", d)
		}
		c.handlerTimeout = d
	})
}

// WithMaxDeliveries sets how many counted handler runs a message gets
// (default 10, at least 1): when the run whose Delivery.Attempt equals n
// fails, the message is dead (ErrTooManyDeliveries), and a message that
// arrives with more deliveries than that (its consumers crashed while
// handling it) is dead without running the handler. Runs that end in
// outbox.Unavailable or idempotency.ErrInProgress, and deliveries that
// never reached the handler, do not count while this process remembers
// them (see Consumer). The server-side consumer keeps MaxDeliver
// unlimited: the Consumer enforces the limit itself, so that the server
// never drops a message silently.
func WithMaxDeliveries(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 {
			c.Fail("max deliveries %d is less than 1", n)
		}
		c.maxDeliveries = n
	})
}

// WithRetryDelay sets how long a message whose handler failed waits before
// it is delivered again: first after the first failed attempt (default
// 1s, at least 1ms), doubling with each counted attempt up to max (default
// 1 minute). The consumer asks for it with NakWithDelay.
func WithRetryDelay(first, max time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if first < time.Millisecond || max < first {
			c.Fail("retry delay %v up to %v: want 1ms <= first <= max", first, max)
		}
		c.retryDelay, c.maxRetryDelay = first, max
	})
}

// WithDeadLetterSubject publishes every dead message to subject before it
// is terminated: the same data and headers, plus HeaderDeadReason,
// HeaderDeadStream, HeaderDeadConsumer, HeaderDeadSequence and
// HeaderDeadDeliveries, with Nats-Msg-Id "<event id>:dead:<durable>". The
// subject must be captured by a stream (another than the consumer's, or
// one its filter does not match). If that publish fails, the message is
// not terminated: it is delivered again later and goes dead again. The
// default is none.
func WithDeadLetterSubject(subject string) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if err := checkSubject(subject); err != nil {
			c.Fail("dead-letter subject: %v", err)
		}
		c.deadSubject = subject
	})
}

// WithOnDead calls fn once for every dead message, after it is
// terminated. fn runs in the consumer's loop: keep it short.
func WithOnDead(fn func(ctx context.Context, d DeadMessage)) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if fn == nil {
			c.Fail("nil OnDead callback")
		}
		c.onDead = fn
	})
}

// WithConsumerConfig lets fn adjust the durable consumer's configuration
// before Run creates or updates it, for settings this package does not
// choose (DeliverPolicy, MaxAckPending, Replicas, Description, …). The
// consumer needs AckPolicy explicit and its Durable name; keep MaxDeliver
// at -1 (see WithMaxDeliveries).
func WithConsumerConfig(fn func(cfg *jetstream.ConsumerConfig)) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if fn == nil {
			c.Fail("nil consumer config function")
		}
		c.configure = fn
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
