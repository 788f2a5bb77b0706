package admin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/admin"
	"github.com/gormoutbox/outbox/admin/internal/admintest"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// secret is in every payload: no list page and no log may show it.
const secret = admintest.Secret

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

// seed writes the events the tests show (admintest.Seed): dead-1 and
// dead-2 dead, fail-1 failed at the head of key customer:42, the rest
// published.
func seed(t testing.TB, db *gorm.DB) { admintest.Seed(t, db) }

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
