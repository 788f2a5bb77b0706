package oteltest

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
)

// meter creates the provider's instruments.
type meter struct {
	embedded.Meter
	p     *MeterProvider
	scope string
}

func newSync[N int64 | float64](m *meter, name string, kind Kind, desc, unit string) (*syncInstrument[N], error) {
	s, err := m.p.instrument(m.scope, name, kind, desc, unit)
	if err != nil {
		return nil, err
	}
	return &syncInstrument[N]{s: s}, nil
}

func (m *meter) Int64Counter(name string, opts ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	c := metric.NewInt64CounterConfig(opts...)
	return newSync[int64](m, name, "Int64Counter", c.Description(), c.Unit())
}

func (m *meter) Int64UpDownCounter(name string, opts ...metric.Int64UpDownCounterOption) (metric.Int64UpDownCounter, error) {
	c := metric.NewInt64UpDownCounterConfig(opts...)
	return newSync[int64](m, name, "Int64UpDownCounter", c.Description(), c.Unit())
}

func (m *meter) Int64Histogram(name string, opts ...metric.Int64HistogramOption) (metric.Int64Histogram, error) {
	c := metric.NewInt64HistogramConfig(opts...)
	return newSync[int64](m, name, "Int64Histogram", c.Description(), c.Unit())
}

func (m *meter) Int64Gauge(name string, opts ...metric.Int64GaugeOption) (metric.Int64Gauge, error) {
	c := metric.NewInt64GaugeConfig(opts...)
	return newSync[int64](m, name, "Int64Gauge", c.Description(), c.Unit())
}

func (m *meter) Float64Counter(name string, opts ...metric.Float64CounterOption) (metric.Float64Counter, error) {
	c := metric.NewFloat64CounterConfig(opts...)
	return newSync[float64](m, name, "Float64Counter", c.Description(), c.Unit())
}

func (m *meter) Float64UpDownCounter(name string, opts ...metric.Float64UpDownCounterOption) (metric.Float64UpDownCounter, error) {
	c := metric.NewFloat64UpDownCounterConfig(opts...)
	return newSync[float64](m, name, "Float64UpDownCounter", c.Description(), c.Unit())
}

func (m *meter) Float64Histogram(name string, opts ...metric.Float64HistogramOption) (metric.Float64Histogram, error) {
	c := metric.NewFloat64HistogramConfig(opts...)
	return newSync[float64](m, name, "Float64Histogram", c.Description(), c.Unit())
}

func (m *meter) Float64Gauge(name string, opts ...metric.Float64GaugeOption) (metric.Float64Gauge, error) {
	c := metric.NewFloat64GaugeConfig(opts...)
	return newSync[float64](m, name, "Float64Gauge", c.Description(), c.Unit())
}

// int64Observable creates an observable int64 instrument and registers
// the callbacks given with it.
func (m *meter) int64Observable(name string, kind Kind, desc, unit string, cbs []metric.Int64Callback) (*int64Observable, error) {
	s, err := m.p.instrument(m.scope, name, kind, desc, unit)
	if err != nil {
		return nil, err
	}
	s.observable = true
	o := &int64Observable{s: s}
	for _, cb := range cbs {
		m.p.register(&registration{p: m.p, fn: func(ctx context.Context, _ metric.Observer) error {
			return cb(ctx, int64Observer{s: s})
		}})
	}
	return o, nil
}

func (m *meter) float64Observable(name string, kind Kind, desc, unit string, cbs []metric.Float64Callback) (*float64Observable, error) {
	s, err := m.p.instrument(m.scope, name, kind, desc, unit)
	if err != nil {
		return nil, err
	}
	s.observable = true
	o := &float64Observable{s: s}
	for _, cb := range cbs {
		m.p.register(&registration{p: m.p, fn: func(ctx context.Context, _ metric.Observer) error {
			return cb(ctx, float64Observer{s: s})
		}})
	}
	return o, nil
}

func (m *meter) Int64ObservableCounter(name string, opts ...metric.Int64ObservableCounterOption) (metric.Int64ObservableCounter, error) {
	c := metric.NewInt64ObservableCounterConfig(opts...)
	return m.int64Observable(name, "Int64ObservableCounter", c.Description(), c.Unit(), c.Callbacks())
}

func (m *meter) Int64ObservableUpDownCounter(name string, opts ...metric.Int64ObservableUpDownCounterOption) (metric.Int64ObservableUpDownCounter, error) {
	c := metric.NewInt64ObservableUpDownCounterConfig(opts...)
	return m.int64Observable(name, "Int64ObservableUpDownCounter", c.Description(), c.Unit(), c.Callbacks())
}

func (m *meter) Int64ObservableGauge(name string, opts ...metric.Int64ObservableGaugeOption) (metric.Int64ObservableGauge, error) {
	c := metric.NewInt64ObservableGaugeConfig(opts...)
	return m.int64Observable(name, "Int64ObservableGauge", c.Description(), c.Unit(), c.Callbacks())
}

func (m *meter) Float64ObservableCounter(name string, opts ...metric.Float64ObservableCounterOption) (metric.Float64ObservableCounter, error) {
	c := metric.NewFloat64ObservableCounterConfig(opts...)
	return m.float64Observable(name, "Float64ObservableCounter", c.Description(), c.Unit(), c.Callbacks())
}

func (m *meter) Float64ObservableUpDownCounter(name string, opts ...metric.Float64ObservableUpDownCounterOption) (metric.Float64ObservableUpDownCounter, error) {
	c := metric.NewFloat64ObservableUpDownCounterConfig(opts...)
	return m.float64Observable(name, "Float64ObservableUpDownCounter", c.Description(), c.Unit(), c.Callbacks())
}

func (m *meter) Float64ObservableGauge(name string, opts ...metric.Float64ObservableGaugeOption) (metric.Float64ObservableGauge, error) {
	c := metric.NewFloat64ObservableGaugeConfig(opts...)
	return m.float64Observable(name, "Float64ObservableGauge", c.Description(), c.Unit(), c.Callbacks())
}

// RegisterCallback implements metric.Meter: f runs at each Collect until
// the registration is removed, and may observe the instruments given.
func (m *meter) RegisterCallback(f metric.Callback, instruments ...metric.Observable) (metric.Registration, error) {
	allowed := map[*series]bool{}
	for _, in := range instruments {
		s := seriesOf(in)
		if s == nil {
			return nil, fmt.Errorf("oteltest: RegisterCallback: %T is not an instrument of this provider", in)
		}
		allowed[s] = true
	}
	r := &registration{p: m.p, allowed: allowed, fn: f}
	m.p.register(r)
	return r, nil
}

func (p *MeterProvider) register(r *registration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.callbacks = append(p.callbacks, r)
}

// registration is a callback and the instruments it may observe (nil: an
// instrument's own callback, which observes that instrument only).
type registration struct {
	embedded.Registration
	p       *MeterProvider
	allowed map[*series]bool
	fn      metric.Callback
	removed bool // under p.mu
}

// Unregister implements metric.Registration.
func (r *registration) Unregister() error {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	r.removed = true
	return nil
}

// run calls the callback with an observer that records the observations
// of its instruments, and reports the others.
func (r *registration) run(ctx context.Context) []error {
	o := &observer{r: r}
	if err := r.fn(ctx, o); err != nil {
		o.errs = append(o.errs, err)
	}
	return o.errs
}

// observer records a callback's observations.
type observer struct {
	embedded.Observer
	r    *registration
	mu   sync.Mutex
	errs []error
}

func (o *observer) observe(in metric.Observable, v float64, opts []metric.ObserveOption) {
	s := seriesOf(in)
	if s == nil || o.r.allowed != nil && !o.r.allowed[s] {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.errs = append(o.errs, fmt.Errorf("oteltest: a callback observed %v, which it was not registered for", in))
		return
	}
	s.add(metric.NewObserveConfig(opts).Attributes(), v)
}

func (o *observer) ObserveInt64(in metric.Int64Observable, v int64, opts ...metric.ObserveOption) {
	o.observe(in, float64(v), opts)
}

func (o *observer) ObserveFloat64(in metric.Float64Observable, v float64, opts ...metric.ObserveOption) {
	o.observe(in, v, opts)
}
