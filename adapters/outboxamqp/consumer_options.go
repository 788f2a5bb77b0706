package outboxamqp

import (
	"context"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox"
)

// Defaults of the consumer options.
const (
	DefaultPrefetch       = 20
	DefaultConcurrency    = 1
	DefaultRetryDelay     = time.Second
	DefaultMaxDeliveries  = 10
	DefaultHandlerTimeout = time.Minute
)

type consumerConfig struct {
	prefetch       int
	concurrency    int
	tag            string
	retryDelay     time.Duration
	maxDeliveries  int
	handlerTimeout time.Duration
	onDead         func(ctx context.Context, d DeadMessage)
	tracerProvider trace.TracerProvider
	common
}

type consumerOption func(*consumerConfig)

func (f consumerOption) applyConsumer(c *consumerConfig) { f(c) }

// WithPrefetch sets how many unacknowledged messages the broker sends the
// consumer ahead (basic.qos prefetch count; default DefaultPrefetch, 1 to
// 65535). Keep it at least WithConcurrency.
func WithPrefetch(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 || n > 65535 {
			c.Fail("prefetch %d is not between 1 and 65535", n)
		}
		c.prefetch = n
	})
}

// WithConcurrency sets how many messages the consumer handles at once
// (default 1, at most 1000). Messages of one partition key are then
// handled concurrently, and in any order.
func WithConcurrency(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 || n > 1000 {
			c.Fail("concurrency %d is not between 1 and 1000", n)
		}
		c.concurrency = n
	})
}

// WithConsumerTag sets the consumer tag (default: one the broker makes).
// It must be unique on its channel and at most 255 bytes.
func WithConsumerTag(tag string) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if len(tag) > maxShortStr {
			c.Fail("consumer tag is longer than %d bytes", maxShortStr)
		}
		c.tag = tag
	})
}

// WithRetryDelay sets how long the consumer waits before it requeues a
// message whose handler failed (default DefaultRetryDelay, at least 1ms):
// RabbitMQ puts a requeued message back at once, so the delay is what
// keeps a failing handler from spinning. The worker that ran the handler
// waits; others go on (WithConcurrency).
func WithRetryDelay(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < time.Millisecond {
			c.Fail("retry delay %v is shorter than 1ms", d)
		}
		c.retryDelay = d
	})
}

// WithMaxDeliveries sets how many failed runs of its handler make a
// message dead (default DefaultMaxDeliveries, at least 1). Runs that end
// in outbox.Unavailable or idempotency.ErrInProgress do not count. The
// count is kept by each consumer in memory, per event id (a message
// requeued to another consumer, or after a restart, counts from zero
// there); for a bound across consumers, use quorum queues and their
// x-delivery-limit, which the broker enforces itself.
func WithMaxDeliveries(n int) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if n < 1 {
			c.Fail("max deliveries %d is less than 1", n)
		}
		c.maxDeliveries = n
	})
}

// WithHandlerTimeout bounds each handler run: its context ends after d
// (default DefaultHandlerTimeout). The handler's context does not end with
// Run's: Run finishes the messages in hand before it returns.
func WithHandlerTimeout(d time.Duration) ConsumerOption {
	return consumerOption(func(c *consumerConfig) {
		if d < time.Millisecond {
			c.Fail("handler timeout %v is shorter than 1ms", d)
		}
		c.handlerTimeout = d
	})
}

// WithOnDead calls fn once for every dead message, after it was rejected
// (and dead-lettered, if the queue has a dead-letter exchange). fn runs
// in the worker that handled the message: keep it short.
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

// DeadMessage is a message that will not be handled again: not an outbox
// event, failed with outbox.Permanent, or failed WithMaxDeliveries times.
// It was rejected without requeue: the broker dead-letters it if the
// queue has a dead-letter exchange (x-dead-letter-exchange), and drops it
// otherwise.
type DeadMessage struct {
	Queue string
	// Message is the delivery as received (its body, headers, tags).
	Message amqp.Delivery
	// Envelope is the decoded event, or nil for a malformed message.
	Envelope *outbox.Envelope
	// Reason wraps the handler's error, ErrMalformed or ErrTooManyDeliveries.
	Reason error
}
