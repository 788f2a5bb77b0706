package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/admin"
	"github.com/gormoutbox/outbox/internal/testenv"
	"github.com/gormoutbox/outbox/relay"
)

// secret is in every payload: no list page and no log may show it.
const secret = "s3cret-card-4242"

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// eachDB runs fn per dialect on a fresh, migrated database.
func eachDB(t *testing.T, fn func(t *testing.T, db *gorm.DB)) {
	testenv.Each(t, func(t *testing.T, db *gorm.DB) {
		must(t, db.Use(&outbox.Plugin{AutoMigrate: true}))
		fn(t, db)
	})
}

// seed writes 20 events and runs a relay over them once: dead-1 and
// dead-2 die, fail-1 (the head of key customer:42, with two events behind
// it) fails and waits an hour, and the rest are published; a relay
// "seeder" logs the attempts.
func seed(t testing.TB, db *gorm.DB) {
	t.Helper()
	testenv.Emit(t, db, 20, func(i int) outbox.Event {
		e := outbox.Event{ID: fmt.Sprintf("ev-%02d", i), Type: []string{"order.created", "invoice.issued"}[i%2], Topic: "orders",
			AggregateType: "order", AggregateID: fmt.Sprint(i), TenantID: "acme",
			Payload: map[string]any{"card": secret, "n": i}, Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
		switch i {
		case 3, 4:
			e.ID = fmt.Sprintf("dead-%d", i-2)
		case 10:
			e.ID, e.PartitionKey = "fail-1", "customer:42"
		case 11, 12:
			e.PartitionKey = "customer:42"
		}
		return e
	})
	pub := relay.PublisherFunc(func(_ context.Context, e *outbox.Envelope) error {
		switch {
		case strings.HasPrefix(e.ID, "dead-"):
			return outbox.Permanent(errors.New("schema mismatch: field total missing"))
		case e.ID == "fail-1":
			return errors.New("broker timeout")
		}
		return nil
	})
	r, err := relay.New(db, pub, relay.WithLogger(slog.New(slog.DiscardHandler)), relay.WithBackoff(func(int) time.Duration { return time.Hour }),
		relay.WithAttemptLog(), relay.WithWorkerID("seeder"))
	must(t, err)
	_, err = r.RunOnce(context.Background())
	must(t, err)
}

// client requests a test server of the handler.
type client struct {
	t   testing.TB
	srv *httptest.Server
}

func newClient(t testing.TB, h http.Handler) *client {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &client{t: t, srv: srv}
}

// do sends a request and returns the status and body.
func (c *client) do(method, path string, form url.Values, hdr ...string) (int, string) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.srv.URL+path, body)
	must(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1] // what a browser sends after a DNS rebinding
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	must(c.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	must(c.t, err)
	return res.StatusCode, string(b)
}

func (c *client) get(path string) (int, string) { return c.do(http.MethodGet, path, nil) }

func (c *client) post(path string, form url.Values) (int, string) {
	return c.do(http.MethodPost, path, form)
}

func newHandler(t testing.TB, db *gorm.DB, opts ...admin.Option) http.Handler {
	t.Helper()
	h, err := admin.NewHandler(db, opts...)
	must(t, err)
	return h
}
