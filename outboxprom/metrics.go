package outboxprom

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/gormoutbox/outbox/consume"
	"github.com/gormoutbox/outbox/internal/optionerr"
	"github.com/gormoutbox/outbox/relay"
)

// ErrInvalidOption is wrapped by the error New and Listen return for an
// option they cannot use.
var ErrInvalidOption = errors.New("outboxprom: invalid option")

// Option configures New and Listen.
type Option func(*config)

type config struct {
	registry *prometheus.Registry
	optionerr.Errors
}

// WithRegistry registers the outbox's series in reg, the application's
// Prometheus registry, and serves reg (with whatever else it holds)
// instead of a registry of its own: one endpoint for the application's
// metrics and the outbox's. Collectors reg lacks (the Go runtime's, the
// process's) are not added. For the client's global registry, pass
// prometheus.DefaultRegisterer.(*prometheus.Registry).
func WithRegistry(reg *prometheus.Registry) Option {
	return func(c *config) {
		if reg == nil {
			c.Fail("WithRegistry(nil): want a *prometheus.Registry")
		}
		c.registry = reg
	}
}

// Metrics is an OpenTelemetry meter provider whose instruments are read
// at each scrape of its handler, in the Prometheus text format.
type Metrics struct {
	provider *sdkmetric.MeterProvider
	handler  http.Handler
}

// New returns Metrics on a Prometheus registry of its own (with the Go
// runtime's and the process's collectors), or on WithRegistry's.
func New(opts ...Option) (*Metrics, error) {
	c := config{Errors: optionerr.Errors{Sentinel: ErrInvalidOption}}
	for _, o := range opts {
		o(&c)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	reg := c.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("outboxprom: the Prometheus exporter: %w", err)
	}
	return &Metrics{
		provider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)),
		handler:  promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
	}, nil
}

// MeterProvider is where instruments record what the endpoint serves:
// pass it to relay.WithMeterProvider (or use RelayOption), or to anything
// else that takes an OpenTelemetry metric.MeterProvider.
func (m *Metrics) MeterProvider() metric.MeterProvider { return m.provider }

// RelayOption is relay.WithMeterProvider(m.MeterProvider()): the relay's
// counters, histograms and table gauges on the endpoint.
func (m *Metrics) RelayOption() relay.Option { return relay.WithMeterProvider(m.provider) }

// ConsumerOption is consume.WithMeterProvider(m.MeterProvider()): a
// consumer of any broker adapter (outboxredis.NewConsumer,
// outboxkafka.NewConsumer …, or outboxasynq.Handler) given it reports its
// outbox.consumer.* series on this page.
func (m *Metrics) ConsumerOption() consume.Option { return consume.WithMeterProvider(m.provider) }

// ServeHTTP serves the metrics in the Prometheus exposition format,
// whatever the request's path: mount it at /metrics.
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) { m.handler.ServeHTTP(w, r) }

// Shutdown stops the meter provider: instruments record nothing more,
// and the endpoint serves no outbox series after it.
func (m *Metrics) Shutdown(ctx context.Context) error {
	if err := m.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("outboxprom: shutting the meter provider down: %w", err)
	}
	return nil
}
