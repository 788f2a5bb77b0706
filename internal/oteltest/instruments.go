package oteltest

import (
	"context"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/embedded"
)

// syncInstrument is every synchronous instrument of values N: its series
// adds, keeps the last value or counts records, by its kind.
type syncInstrument[N int64 | float64] struct {
	embedded.Int64Counter
	embedded.Int64UpDownCounter
	embedded.Int64Histogram
	embedded.Int64Gauge
	embedded.Float64Counter
	embedded.Float64UpDownCounter
	embedded.Float64Histogram
	embedded.Float64Gauge
	s *series
}

func (i *syncInstrument[N]) Add(_ context.Context, v N, opts ...metric.AddOption) {
	i.s.add(metric.NewAddConfig(opts).Attributes(), float64(v))
}

func (i *syncInstrument[N]) Record(_ context.Context, v N, opts ...metric.RecordOption) {
	i.s.add(metric.NewRecordConfig(opts).Attributes(), float64(v))
}

// Enabled reports true: every measurement is kept.
func (i *syncInstrument[N]) Enabled(context.Context) bool { return true }

// int64Observable is every observable int64 instrument.
type int64Observable struct {
	metric.Int64Observable // the API's unexported marker method; never called
	embedded.Int64ObservableCounter
	embedded.Int64ObservableUpDownCounter
	embedded.Int64ObservableGauge
	s *series
}

// float64Observable is every observable float64 instrument.
type float64Observable struct {
	metric.Float64Observable
	embedded.Float64ObservableCounter
	embedded.Float64ObservableUpDownCounter
	embedded.Float64ObservableGauge
	s *series
}

// seriesOf is the series of one of this package's observable instruments,
// or nil.
func seriesOf(in metric.Observable) *series {
	switch o := in.(type) {
	case *int64Observable:
		return o.s
	case *float64Observable:
		return o.s
	}
	return nil
}

// int64Observer observes an instrument's own callback.
type int64Observer struct {
	embedded.Int64Observer
	s *series
}

func (o int64Observer) Observe(v int64, opts ...metric.ObserveOption) {
	o.s.add(metric.NewObserveConfig(opts).Attributes(), float64(v))
}

type float64Observer struct {
	embedded.Float64Observer
	s *series
}

func (o float64Observer) Observe(v float64, opts ...metric.ObserveOption) {
	o.s.add(metric.NewObserveConfig(opts).Attributes(), v)
}
