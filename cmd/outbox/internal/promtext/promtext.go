// Package promtext writes OpenTelemetry metrics collected by an SDK
// ManualReader in the Prometheus text exposition format (version 0.0.4),
// so that the outbox CLI serves /metrics without the Prometheus client
// library, which library users would otherwise download.
//
// Counters (monotonic sums) are written as counters named with "_total",
// non-monotonic sums and gauges as gauges, explicit-bucket histograms as
// histograms (cumulative _bucket series with le labels, _sum and _count).
// Exponential histograms and summaries are skipped. Names follow the
// OpenTelemetry-to-Prometheus rules (see Name).
package promtext

import (
	"bufio"
	"context"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// ContentType is the media type of the text format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves the metrics reader collects, in the text format, on every
// request.
func Handler(reader sdkmetric.Reader) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(r.Context(), &rm); err != nil && len(rm.ScopeMetrics) == 0 {
			http.Error(w, "collecting metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", ContentType)
		_ = Write(w, &rm)
	})
}

// Collect is a shorthand for collecting from reader and writing to w.
func Collect(ctx context.Context, w io.Writer, reader sdkmetric.Reader) error {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return err
	}
	return Write(w, &rm)
}

// family is one metric name's lines.
type family struct {
	name, help, typ string
	lines           []string
}

// Write writes rm in the text format. Metrics of several scopes that map
// to one name are written as one family; one whose type differs from the
// first of its name is skipped.
func Write(w io.Writer, rm *metricdata.ResourceMetrics) error {
	var (
		order []string
		fams  = map[string]*family{}
	)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			f := convert(m)
			if f == nil {
				continue
			}
			if have, ok := fams[f.name]; ok {
				if have.typ == f.typ {
					have.lines = append(have.lines, f.lines...)
				}
				continue
			}
			fams[f.name] = f
			order = append(order, f.name)
		}
	}
	bw := bufio.NewWriter(w)
	for _, name := range order {
		f := fams[name]
		if f.help != "" {
			bw.WriteString("# HELP " + name + " " + escapeHelp(f.help) + "\n")
		}
		bw.WriteString("# TYPE " + name + " " + f.typ + "\n")
		for _, l := range f.lines {
			bw.WriteString(l + "\n")
		}
	}
	return bw.Flush()
}

// convert returns the family of m, or nil for an aggregation the text
// format is not written for.
func convert(m metricdata.Metrics) *family {
	switch d := m.Data.(type) {
	case metricdata.Sum[int64]:
		return sum(m, d.IsMonotonic, d.DataPoints)
	case metricdata.Sum[float64]:
		return sum(m, d.IsMonotonic, d.DataPoints)
	case metricdata.Gauge[int64]:
		return points(m, Name(m.Name, m.Unit, false, true), "gauge", d.DataPoints)
	case metricdata.Gauge[float64]:
		return points(m, Name(m.Name, m.Unit, false, true), "gauge", d.DataPoints)
	case metricdata.Histogram[int64]:
		return histogram(m, d.DataPoints)
	case metricdata.Histogram[float64]:
		return histogram(m, d.DataPoints)
	}
	return nil
}

func sum[N int64 | float64](m metricdata.Metrics, monotonic bool, dps []metricdata.DataPoint[N]) *family {
	if monotonic {
		return points(m, Name(m.Name, m.Unit, true, false), "counter", dps)
	}
	return points(m, Name(m.Name, m.Unit, false, true), "gauge", dps)
}

func points[N int64 | float64](m metricdata.Metrics, name, typ string, dps []metricdata.DataPoint[N]) *family {
	f := &family{name: name, help: m.Description, typ: typ}
	for _, dp := range dps {
		f.lines = append(f.lines, name+labels(dp.Attributes, "")+" "+number(dp.Value))
	}
	return f
}

func histogram[N int64 | float64](m metricdata.Metrics, dps []metricdata.HistogramDataPoint[N]) *family {
	name := Name(m.Name, m.Unit, false, false)
	f := &family{name: name, help: m.Description, typ: "histogram"}
	for _, dp := range dps {
		var cum uint64
		for i, bound := range dp.Bounds {
			if i < len(dp.BucketCounts) {
				cum += dp.BucketCounts[i]
			}
			f.lines = append(f.lines, name+"_bucket"+labels(dp.Attributes, float(bound))+" "+strconv.FormatUint(cum, 10))
		}
		f.lines = append(f.lines,
			name+"_bucket"+labels(dp.Attributes, "+Inf")+" "+strconv.FormatUint(dp.Count, 10),
			name+"_sum"+labels(dp.Attributes, "")+" "+number(dp.Sum),
			name+"_count"+labels(dp.Attributes, "")+" "+strconv.FormatUint(dp.Count, 10))
	}
	return f
}

// labels renders a label set, with le added when not empty.
func labels(set attribute.Set, le string) string {
	if set.Len() == 0 && le == "" {
		return ""
	}
	var sb strings.Builder
	sb.WriteByte('{')
	it := set.Iter()
	first := true
	for it.Next() {
		kv := it.Attribute()
		if !first {
			sb.WriteByte(',')
		}
		first = false
		sb.WriteString(LabelName(string(kv.Key)) + `="` + escapeLabel(kv.Value.Emit()) + `"`)
	}
	if le != "" {
		if !first {
			sb.WriteByte(',')
		}
		sb.WriteString(`le="` + le + `"`)
	}
	sb.WriteByte('}')
	return sb.String()
}

func number[N int64 | float64](v N) string {
	switch x := any(v).(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return float(x)
	}
	return "NaN"
}

func float(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "+Inf"
	case math.IsInf(f, -1):
		return "-Inf"
	case math.IsNaN(f):
		return "NaN"
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }
