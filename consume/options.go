package consume

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/optionerr"
)

// Defaults of the options.
const (
	DefaultConcurrency    = 1
	DefaultMaxDeliveries  = 10
	DefaultRetryDelay     = time.Second
	DefaultMaxRetryDelay  = time.Minute
	DefaultHandlerTimeout = time.Minute
)

// Option configures a Consumer. The options of this package are shared by
// every broker; a broker adapter's own options (made with
// TransportOption) are Options too, passed in the same list to its
// NewConsumer. Bad values are reported, joined, by New (and so by the
// adapters' NewConsumer), each wrapping ErrInvalidOption.
type Option struct {
	shared    func(*settings)
	transport func(target any) (ok bool, err error)
	name      string
}

// settings are the values of the shared options.
type settings struct {
	concurrency    int
	maxDeliveries  int
	retryDelay     time.Duration
	maxRetryDelay  time.Duration
	handlerTimeout time.Duration
	logger         *slog.Logger
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
	onDead         func(ctx context.Context, d DeadLetter)
	registry       *outbox.Registry
	optionerr.Errors
}

func shared(f func(*settings)) Option { return Option{shared: f} }

// WithConcurrency sets how many messages a Consumer handles at once
// (default 1, at most 1000). Messages of one partition key (or of the
// transport's order key, such as a Kafka partition) still run one after
// the other, in the order received.
func WithConcurrency(n int) Option {
	return shared(func(s *settings) {
		if n < 1 || n > 1000 {
			s.Fail("concurrency %d is not between 1 and 1000", n)
		}
		s.concurrency = n
	})
}

// WithMaxDeliveries sets how many counted runs of its handler a message
// gets (default 10, at least 1): when the last one fails, or the message
// is delivered again after it (a crash cut the run short), it is dead.
// Runs that end in outbox.Unavailable, outbox.Snooze or
// idempotency.ErrInProgress, and deliveries that never reached the
// handler, do not count.
func WithMaxDeliveries(n int) Option {
	return shared(func(s *settings) {
		if n < 1 {
			s.Fail("max deliveries %d is less than 1", n)
		}
		s.maxDeliveries = n
	})
}

// WithRetryDelay sets the wait before a message whose handler failed is
// delivered again (default 1s, at least 1ms): it doubles with each
// counted failure, up to WithMaxRetryDelay.
func WithRetryDelay(d time.Duration) Option {
	return shared(func(s *settings) {
		if d < time.Millisecond {
			s.Fail("retry delay %v is shorter than 1ms", d)
		}
		s.retryDelay = d
	})
}

// WithMaxRetryDelay bounds the retry delay's doubling (default 1 minute,
// at least 1ms).
func WithMaxRetryDelay(d time.Duration) Option {
	return shared(func(s *settings) {
		if d < time.Millisecond {
			s.Fail("max retry delay %v is shorter than 1ms", d)
		}
		s.maxRetryDelay = d
	})
}

// WithHandlerTimeout bounds each handler run: its context ends after d
// (default: what the broker allows a message to stay unacknowledged, such
// as outboxnats' ack wait, else 1 minute). The handler's context does not
// end with Run's: Run finishes the messages in hand before it returns.
func WithHandlerTimeout(d time.Duration) Option {
	return shared(func(s *settings) {
		if d < time.Millisecond {
			s.Fail("handler timeout %v is shorter than 1ms", d)
		}
		s.handlerTimeout = d
	})
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return shared(func(s *settings) {
		if l == nil {
			s.Fail("nil logger")
		}
		s.logger = l
	})
}

// WithTracerProvider sets where consumer spans are created (default
// otel.GetTracerProvider(), looked up by New).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return shared(func(s *settings) {
		if tp == nil {
			s.Fail("nil tracer provider")
		}
		s.tracerProvider = tp
	})
}

// WithMeterProvider sets where the consumer's metrics are recorded
// (default otel.GetMeterProvider(), looked up by New).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return shared(func(s *settings) {
		if mp == nil {
			s.Fail("nil meter provider")
		}
		s.meterProvider = mp
	})
}

// WithOnDead calls fn once for every dead message, after the transport
// moved it to its dead letter. fn runs in the worker that handled the
// message: keep it short.
func WithOnDead(fn func(ctx context.Context, d DeadLetter)) Option {
	return shared(func(s *settings) {
		if fn == nil {
			s.Fail("nil OnDead callback")
		}
		s.onDead = fn
	})
}

// WithRegistry checks every event with reg before its handler runs
// (outbox.Registry.Check): the handler receives the upcast envelope, and
// an event that fails the check is dead at once (ErrBadPayload). A nil
// reg is an error.
func WithRegistry(reg *outbox.Registry) Option {
	return shared(func(s *settings) {
		if reg == nil {
			s.Fail("nil registry")
		}
		s.registry = reg
	})
}

// TransportOption makes an Option that sets a transport's own
// configuration, of type T: a broker adapter's options are made with it,
// and its NewConsumer applies them with ApplyTransportOptions. name names
// the option in errors ("outboxredis.WithMinIdle"); an error of f is
// reported by New, wrapping ErrInvalidOption. An option of one adapter
// given to another's NewConsumer is reported too.
func TransportOption[T any](name string, f func(c *T) error) Option {
	return Option{name: name, transport: func(target any) (bool, error) {
		c, ok := target.(*T)
		if !ok {
			return false, nil
		}
		return true, f(c)
	}}
}

// ApplyTransportOptions applies to c the options of opts made by
// TransportOption for T, and returns their errors (joined, each wrapping
// ErrInvalidOption), with one for each option made for another type. The
// shared options are left to New.
func ApplyTransportOptions[T any](c *T, opts []Option) error {
	errs := optionerr.Errors{Sentinel: ErrInvalidOption}
	for _, o := range opts {
		if o.transport == nil {
			continue
		}
		ok, err := o.transport(c)
		switch {
		case !ok:
			errs.Fail("%s is not an option of this consumer (%s)", o.name, reflect.TypeFor[T]())
		case err != nil:
			errs.Fail("%s: %w", o.name, err)
		}
	}
	return errs.Err()
}

// newSettings applies the shared options of opts over the defaults.
func newSettings(opts []Option) settings {
	s := settings{
		concurrency:   DefaultConcurrency,
		maxDeliveries: DefaultMaxDeliveries,
		retryDelay:    DefaultRetryDelay,
		maxRetryDelay: DefaultMaxRetryDelay,
		Errors:        optionerr.Errors{Sentinel: ErrInvalidOption},
	}
	for _, o := range opts {
		switch {
		case o.shared != nil:
			o.shared(&s)
		case o.transport == nil:
			s.Fail("zero Option")
		}
	}
	return s
}

// Settings are the values of the shared options, with their defaults, for
// a transport that needs them (to size a broker's own settings, or log).
type Settings struct {
	Concurrency    int
	MaxDeliveries  int
	RetryDelay     time.Duration
	MaxRetryDelay  time.Duration
	HandlerTimeout time.Duration // 0: not set (the transport's default applies)
	Logger         *slog.Logger
}

// SettingsOf returns the values the shared options of opts set. Errors are
// left to New.
func SettingsOf(opts ...Option) Settings {
	s := newSettings(opts)
	if s.logger == nil {
		s.logger = slog.Default()
	}
	return Settings{Concurrency: s.concurrency, MaxDeliveries: s.maxDeliveries, RetryDelay: s.retryDelay,
		MaxRetryDelay: s.maxRetryDelay, HandlerTimeout: s.handlerTimeout, Logger: s.logger}
}

// String names the option, for the errors of options given to the wrong
// consumer.
func (o Option) String() string {
	if o.name != "" {
		return o.name
	}
	return fmt.Sprintf("consume.Option(%p)", o.shared)
}
