package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/gormoutbox/outbox/cmd/outbox/internal/promtext"
	"github.com/gormoutbox/outbox/relay"
)

// serveMetrics listens on addr and serves the relay's metrics at /metrics
// in the Prometheus text format, read from an OpenTelemetry SDK
// ManualReader at each scrape (so the table gauges are measured then).
// It returns the relay option that records into it, and stop.
func serveMetrics(addr string, log *slog.Logger) (relay.Option, func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promtext.Handler(reader))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("outbox relay: metrics at /metrics\n"))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("the metrics server stopped", "error", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = mp.Shutdown(ctx)
	}
	return relay.WithMeterProvider(mp), stop, nil
}
