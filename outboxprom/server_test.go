package outboxprom_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gormoutbox/outbox/outboxprom"
	"github.com/gormoutbox/outbox/outboxtest"
)

// Listen serves the page at /metrics of a port of its own (and a line at
// /), until Shutdown; a port in use is Listen's own error.
func TestListen(t *testing.T) {
	s, err := outboxprom.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	db := outboxtest.DB(t)
	emitN(t, db, 3)
	runRelay(t, db, s.Metrics, 3)

	url := "http://" + s.Addr()
	if code, body := get(t, url+"/metrics"); code != http.StatusOK || !strings.Contains(body, "outbox_events_published_total{") {
		t.Errorf("GET /metrics: %d\n%s", code, body)
	}
	if code, body := get(t, url+"/"); code != http.StatusOK || !strings.Contains(body, "/metrics") {
		t.Errorf("GET /: %d %q", code, body)
	}
	if code, _ := get(t, url+"/other"); code != http.StatusNotFound {
		t.Errorf("GET /other: %d, want 404", code)
	}

	if _, err := outboxprom.Listen(s.Addr()); err == nil || !strings.Contains(err.Error(), "outboxprom: listening on "+s.Addr()) {
		t.Errorf("Listen on a port in use: %v", err)
	}

	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(url + "/metrics"); err == nil {
		resp.Body.Close()
		t.Errorf("after Shutdown, GET /metrics answered %d", resp.StatusCode)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("a second Shutdown: %v", err)
	}
}
