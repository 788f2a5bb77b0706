package outboxprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/outboxtestenv"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/outboxprom"
	"github.com/gormoutbox/outbox/outboxtest"
	"github.com/gormoutbox/outbox/relay"
)

// TestMain removes the examples' SQLite files (see outboxtestenv.Main).
func TestMain(m *testing.M) { outboxtestenv.Main(m) }

// A running relay given RelayOption reports what it did on the page, per
// dialect: its counters, its publish-duration histogram and the table's
// gauges, beside the Go runtime's series. Before the relay ran (the
// control) the page has no outbox series.
func TestRelayMetricsOnThePage(t *testing.T) {
	for _, d := range testenv.Dialects {
		t.Run(d, func(t *testing.T) {
			db := outboxtestenv.DB(t, d)
			m, err := outboxprom.New()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
			if page := scrape(t, m); strings.Contains(page, "outbox_") || !strings.Contains(page, "go_goroutines") {
				t.Fatalf("before the relay ran, the page is:\n%s", page)
			}

			emitN(t, db, 10)
			runRelay(t, db, m, 10) // every fifth event fails once

			page := scrape(t, m)
			for name, want := range map[string]float64{
				"outbox_events_published_total":         10,
				"outbox_events_failed_total":            2,
				"outbox_events_claimed_total":           12,
				"outbox_publish_duration_seconds_count": 12,
				"outbox_events_pending":                 0,
			} {
				if got, ok := sample(page, name); !ok || got != want {
					t.Errorf("%s = %v (found: %v), want %v", name, got, ok, want)
				}
			}
			for _, name := range []string{"outbox_events_oldest_pending_age_seconds", "outbox_event_lag_seconds_count", "go_goroutines"} {
				if _, ok := sample(page, name); !ok {
					t.Errorf("no %s on the page", name)
				}
			}
			if !strings.Contains(page, `outbox_event_type="invoice.issued"`) || !strings.Contains(page, `outbox_table="outbox_events"`) {
				t.Errorf("the series lack their labels:\n%s", grep(page, "outbox_events_published_total"))
			}
		})
	}
}

// WithRegistry puts the outbox's series in the application's registry,
// beside its own, and serves that registry as it is (no Go collector
// added).
func TestWithRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	orders := prometheus.NewCounter(prometheus.CounterOpts{Name: "app_orders_total", Help: "Orders."})
	reg.MustRegister(orders)
	orders.Add(3)
	m, err := outboxprom.New(outboxprom.WithRegistry(reg))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	db := outboxtest.DB(t)
	emitN(t, db, 4)
	runRelay(t, db, m, 4)

	page := scrape(t, m)
	if v, _ := sample(page, "app_orders_total"); v != 3 {
		t.Errorf("app_orders_total = %v, want 3", v)
	}
	if v, _ := sample(page, "outbox_events_published_total"); v != 4 {
		t.Errorf("outbox_events_published_total = %v, want 4", v)
	}
	if _, ok := sample(page, "go_goroutines"); ok {
		t.Errorf("a Go collector was added to the application's registry")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range families {
		names = append(names, f.GetName())
	}
	if !strings.Contains(strings.Join(names, " "), "outbox_events_published_total") {
		t.Errorf("the registry gathers %v, without the outbox's series", names)
	}
}

// Two Metrics in one process are independent: no registration conflict
// (nothing global), and what one records is not on the other's page.
func TestMetricsAreIndependent(t *testing.T) {
	a, err := outboxprom.New()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Shutdown(context.Background())
	b, err := outboxprom.New()
	if err != nil {
		t.Fatalf("a second New: %v", err)
	}
	defer b.Shutdown(context.Background())
	db := outboxtest.DB(t)
	emitN(t, db, 2)
	runRelay(t, db, a, 2)
	if v, _ := sample(scrape(t, a), "outbox_events_published_total"); v != 2 {
		t.Errorf("a: published %v, want 2", v)
	}
	if page := scrape(t, b); strings.Contains(page, "outbox_") {
		t.Errorf("b's page shows a's series:\n%s", grep(page, "outbox_"))
	}
}

// After Shutdown, instruments record nothing and the page has no outbox
// series.
func TestMetricsShutdown(t *testing.T) {
	m, err := outboxprom.New()
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.MeterProvider().Meter("test").Int64Counter("outbox.test")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 1)
	if _, ok := sample(scrape(t, m), "outbox_test_total"); !ok {
		t.Fatalf("no outbox_test_total before Shutdown")
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 1)
	if page := scrape(t, m); strings.Contains(page, "outbox_test_total") {
		t.Errorf("after Shutdown the page still has:\n%s", grep(page, "outbox_test"))
	}
}

func TestInvalidOption(t *testing.T) {
	_, err := outboxprom.New(outboxprom.WithRegistry(nil))
	if !errors.Is(err, outboxprom.ErrInvalidOption) || !strings.Contains(err.Error(), "WithRegistry(nil)") {
		t.Errorf("New(WithRegistry(nil)) = %v", err)
	}
	if _, err := outboxprom.Listen("127.0.0.1:0", outboxprom.WithRegistry(nil)); !errors.Is(err, outboxprom.ErrInvalidOption) {
		t.Errorf("Listen(WithRegistry(nil)) = %v", err)
	}
}

// scrape GETs m's page, as Prometheus would.
func scrape(t testing.TB, m http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// get GETs url and returns the status and body.
func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// sample sums the values of the series called name on a page in the
// Prometheus text format, whatever their labels; ok is false without one.
func sample(page, name string) (sum float64, ok bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(?:\{[^}]*\})? (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(page, -1) {
		v, err := strconv.ParseFloat(m[1], 64)
		if err == nil {
			sum, ok = sum+v, true
		}
	}
	return sum, ok
}

func grep(page, prefix string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func emitN(t testing.TB, db *gorm.DB, n int) {
	t.Helper()
	err := db.Transaction(func(tx *gorm.DB) error {
		for i := range n {
			if err := outbox.Emit(tx, outbox.Event{ID: fmt.Sprintf("invoice-%d", i), Type: "invoice.issued", Payload: map[string]int{"n": i}}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runRelay starts a relay reporting to m until m's page counts the n
// events published (the first attempt of every fifth one fails); the relay
// runs until the test ends, so that scrapes observe the table's gauges.
func runRelay(t testing.TB, db *gorm.DB, m *outboxprom.Metrics, n float64) {
	t.Helper()
	pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
		var i int
		_, _ = fmt.Sscanf(e.ID, "invoice-%d", &i)
		if e.Attempt == 1 && i%5 == 0 {
			return errors.New("transient")
		}
		return nil
	})
	r, err := relay.New(db, pub, m.RelayOption(), relay.WithPollInterval(10*time.Millisecond),
		relay.WithBackoff(func(int) time.Duration { return 0 }), relay.WithLogger(testenv.Logger(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- r.Start(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-stopped; err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		v, _ := sample(scrape(t, m), "outbox_events_published_total")
		if v == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page counts %v of %v events published", v, n)
		}
	}
}
