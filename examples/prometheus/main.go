// Command prometheus serves the relay's metrics on a Prometheus /metrics
// endpoint with package outboxprom (three lines: Listen, Shutdown,
// RelayOption): it writes orders on SQLite, relays their events to an
// in-process handler, and prints the outbox series that a Prometheus
// server would scrape.
//
//	cd examples/prometheus && go run . [-addr 127.0.0.1:9464] [-serve]
//
// It is a module of its own, as outboxprom is, so that the library does
// not depend on the Prometheus client.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/outboxprom"
	"github.com/gormoutbox/outbox/relay"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:9464", "address of the /metrics endpoint")
	serve := flag.Bool("serve", false, "keep serving /metrics after the run, until interrupted")
	events := flag.Int("events", 200, "events to write and relay")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *addr, *events, *serve, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "prometheus example:", err)
		os.Exit(1)
	}
}

// run writes n events, relays them, then prints the outbox series scraped
// from its own /metrics endpoint.
func run(ctx context.Context, addr string, n int, serve bool, out io.Writer) error {
	// 1. The relay's metrics on a Prometheus endpoint: Listen serves
	//    /metrics, RelayOption (below) makes the relay report there.
	metrics, err := outboxprom.Listen(addr)
	if err != nil {
		return err
	}
	defer metrics.Shutdown(context.Background())

	// 2. A database with an outbox, and some events.
	dir, err := os.MkdirTemp("", "outbox-prometheus")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	db, err := gorm.Open(openSQLite(filepath.Join(dir, "app.db")), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		return err
	}
	if err := db.Use(&outbox.Plugin{AutoMigrate: true}); err != nil {
		return err
	}
	err = db.Transaction(func(tx *gorm.DB) error {
		for i := range n {
			if err := outbox.Emit(tx, outbox.Event{ID: fmt.Sprintf("invoice-%d", i), Type: "invoice.issued", Payload: map[string]int{"n": i}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}

	// 3. A running relay that reports to the meter provider; every tenth
	//    delivery fails once.
	var delivered atomic.Int64
	pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
		if e.Attempt == 1 && strings.HasSuffix(e.ID, "0") {
			return errors.New("transient")
		}
		delivered.Add(1)
		return nil
	})
	r, err := relay.New(db, pub, metrics.RelayOption(), relay.WithPollInterval(10*time.Millisecond),
		relay.WithBackoff(func(int) time.Duration { return 0 }), relay.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(rctx) }()
	for deadline := time.Now().Add(30 * time.Second); delivered.Load() < int64(n); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d events delivered", delivered.Load(), n)
		}
	}
	// Let the last batch's outcome be recorded before scraping.
	insp, err := relay.NewInspector(db)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s, err := insp.GetStats(ctx)
		if err != nil {
			return err
		}
		if s.Counts[outbox.StatusPublished] == int64(n) || time.Now().After(deadline) {
			break
		}
	}

	// 4. Scrape our own endpoint, as Prometheus would, while the relay runs
	//    (the table gauges are observed while a relay runs).
	resp, err := http.Get("http://" + metrics.Addr() + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "outbox_") && !strings.Contains(line, "_bucket{") {
			fmt.Fprintln(out, line)
		}
	}
	if serve {
		fmt.Fprintf(out, "serving http://%s/metrics until interrupted\n", metrics.Addr())
		<-ctx.Done()
	}
	stop()
	return <-stopped
}
