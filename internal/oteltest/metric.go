// Package oteltest records what code measures and traces through the
// OpenTelemetry API, in memory, for tests: a MeterProvider whose Collect
// returns every instrument's points, and a TracerProvider that keeps the
// spans it started. It implements the API's interfaces itself, so that the
// core module's tests need no OpenTelemetry SDK in its go.mod (a library
// user would download it with the module). The SDK's own behaviour with
// the relay (its aggregation, the Prometheus exporter) is tested where the
// SDK is a dependency anyway: outboxprom and the CLI's --metrics-addr.
//
// What it records follows the SDK's cumulative aggregation: a counter's
// point is its total per attribute set, a histogram's the count and sum of
// its records, a synchronous gauge's its last value; an observable
// instrument has the points its callbacks observed in this Collect only,
// so an unregistered callback's gauges are absent, as they are from the
// SDK. Instrument names are checked against the API's syntax, as the SDK
// checks them.
package oteltest

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
)

// Kind names an instrument's kind, as the API's constructor does
// ("Int64Counter", "Float64Histogram", "Int64ObservableGauge", …).
type Kind string

// Metric is one instrument's points as of a Collect.
type Metric struct {
	Name, Description, Unit string
	// Scope is the name of the meter that created the instrument.
	Scope string
	Kind  Kind
	// Points holds one point per attribute set, in the order the sets
	// were first recorded.
	Points []Point
}

// Point is an instrument's measurements for one attribute set.
type Point struct {
	Attributes attribute.Set
	// Value is a counter's total, a histogram's sum or a gauge's last
	// value.
	Value float64
	// Count is how many measurements the point holds.
	Count int64
}

// Total is the sum of the points' values (a counter's total over every
// attribute set).
func (m Metric) Total() float64 {
	var n float64
	for _, p := range m.Points {
		n += p.Value
	}
	return n
}

// Metrics are the instruments of one Collect by name.
type Metrics map[string]Metric

// MeterProvider is a metric.MeterProvider that keeps every measurement in
// memory. The zero value is not usable: use NewMeterProvider.
type MeterProvider struct {
	embedded.MeterProvider
	mu          sync.Mutex
	instruments map[string]*series
	order       []string
	callbacks   []*registration
}

// NewMeterProvider returns an empty MeterProvider.
func NewMeterProvider() *MeterProvider {
	return &MeterProvider{instruments: map[string]*series{}}
}

// Meter implements metric.MeterProvider.
func (p *MeterProvider) Meter(name string, _ ...metric.MeterOption) metric.Meter {
	return &meter{p: p, scope: name}
}

// validName is the API's instrument name syntax.
var validName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_./-]{0,254}$`)

// instrument returns the series of name, created if new; it refuses an
// invalid name and a name taken by another kind.
func (p *MeterProvider) instrument(scope, name string, kind Kind, desc, unit string) (*series, error) {
	if !validName.MatchString(name) {
		return nil, fmt.Errorf("oteltest: invalid instrument name %q", name)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.instruments[name]; ok {
		if s.m.Kind != kind {
			return nil, fmt.Errorf("oteltest: instrument %q is a %s, not a %s", name, s.m.Kind, kind)
		}
		return s, nil
	}
	s := &series{m: Metric{Name: name, Description: desc, Unit: unit, Scope: scope, Kind: kind}, points: map[attribute.Distinct]int{}}
	p.instruments[name] = s
	p.order = append(p.order, name)
	return s, nil
}

// Collect runs the registered callbacks and returns every instrument that
// has points: the synchronous ones' since they were created, the
// observable ones' of this Collect. The error joins the callbacks' errors
// and observations of instruments a callback was not registered for (the
// SDK reports both too).
func (p *MeterProvider) Collect(ctx context.Context) (Metrics, error) {
	p.mu.Lock()
	regs := make([]*registration, 0, len(p.callbacks))
	for _, r := range p.callbacks {
		if !r.removed {
			regs = append(regs, r)
		}
	}
	for _, s := range p.instruments {
		if s.observable {
			s.reset()
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, r := range regs {
		errs = append(errs, r.run(ctx)...)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	out := Metrics{}
	for _, name := range p.order {
		if m := p.instruments[name].snapshot(); len(m.Points) > 0 {
			out[name] = m
		}
	}
	return out, errors.Join(errs...)
}

// Names are the names of the instruments that have points, sorted.
func (m Metrics) Names() []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// series is one instrument's points.
type series struct {
	mu         sync.Mutex
	m          Metric
	points     map[attribute.Distinct]int // attribute set → index in m.Points
	observable bool
}

// add records v for the set: a sum, a last value or one more record of a
// histogram, by kind.
func (s *series) add(set attribute.Set, v float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.points[set.Equivalent()]
	if !ok {
		i = len(s.m.Points)
		s.points[set.Equivalent()] = i
		s.m.Points = append(s.m.Points, Point{Attributes: set})
	}
	p := &s.m.Points[i]
	p.Count++
	switch s.m.Kind {
	case "Int64Gauge", "Float64Gauge", "Int64ObservableGauge", "Float64ObservableGauge",
		"Int64ObservableCounter", "Float64ObservableCounter", "Int64ObservableUpDownCounter", "Float64ObservableUpDownCounter":
		p.Value = v // an observable counter observes its total
	default:
		p.Value += v
	}
}

func (s *series) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m.Points = nil
	clear(s.points)
}

func (s *series) snapshot() Metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.m
	m.Points = append([]Point(nil), s.m.Points...)
	return m
}
