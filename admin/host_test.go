package admin_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/admin"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// securityHeaders are the headers every response carries.
var securityHeaders = map[string]string{
	"Cache-Control":           "no-store",
	"X-Frame-Options":         "DENY",
	"X-Content-Type-Options":  "nosniff",
	"Content-Security-Policy": "frame-ancestors 'none'",
}

func checkSecurityHeaders(t *testing.T, what string, res *http.Response) {
	t.Helper()
	for k, want := range securityHeaders {
		if got := res.Header.Get(k); !strings.Contains(got, want) {
			t.Errorf("%s: %s is %q, want %q", what, k, got, want)
		}
	}
}

// A page reached through a DNS rebinding (the attacker's name resolving
// to 127.0.0.1, so that the browser sends that name as Host and as its
// own origin) is refused before anything runs: no page, no payload, no
// action. Loopback addresses, localhost and the names allowed with
// WithAllowedHosts are served.
func TestRebindingIsRefused(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		port := c.srv.URL[strings.LastIndex(c.srv.URL, ":")+1:]
		evil := "rebind.attacker.example:" + port
		res, body := c.send(http.MethodGet, "/events/dead-1?payload=1", "", "Host", evil)
		if res.StatusCode != http.StatusForbidden || strings.Contains(body, secret) || !strings.Contains(body, "WithAllowedHosts") {
			t.Errorf("GET through a rebinding: %d, payload shown %v:\n%.500s", res.StatusCode, strings.Contains(body, secret), body)
		}
		checkSecurityHeaders(t, "the refused host's page", res)
		res, _ = c.send(http.MethodPost, "/actions/replay", "event_id=dead-1&confirm=yes",
			"Host", evil, "Origin", "http://"+evil, "Sec-Fetch-Site", "same-origin")
		if res.StatusCode != http.StatusForbidden {
			t.Errorf("POST through a rebinding: %d, want 403", res.StatusCode)
		}
		if s := statusOf(t, db, "dead-1"); s != outbox.StatusDead {
			t.Errorf("a rebinding replayed dead-1: %s", s)
		}
		for _, host := range []string{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST", "localhost.:" + port, "[::1]:" + port, "127.1.2.3", "[::ffff:127.0.0.1]:" + port} {
			if res, body := c.send(http.MethodGet, "/", "", "Host", host); res.StatusCode != http.StatusOK {
				t.Errorf("Host %s: %d, want 200:\n%.300s", host, res.StatusCode, body)
			}
		}
		for _, host := range []string{"127.0.0.1.attacker.example", "localhost.attacker.example:" + port, "10.0.0.1:" + port,
			"[::2]", "0.0.0.0:" + port, "ops.example.com"} {
			if res, _ := c.send(http.MethodGet, "/", "", "Host", host); res.StatusCode != http.StatusForbidden {
				t.Errorf("Host %q: %d, want 403", host, res.StatusCode)
			}
		}

		allowed := newClient(t, newHandler(t, db, admin.WithAllowedHosts("ops.example.com", "Admin.Internal:8443")))
		for host, want := range map[string]int{"ops.example.com": 200, "OPS.example.com:443": 200, "admin.internal:8443": 200,
			"admin.internal:8444": 403, "admin.internal": 403, "127.0.0.1": 200, "evil.example": 403} {
			if res, _ := allowed.send(http.MethodGet, "/", "", "Host", host); res.StatusCode != want {
				t.Errorf("allowed hosts, Host %s: %d, want %d", host, res.StatusCode, want)
			}
		}
		// The name allowed posts from its own origin, as behind a proxy.
		res, _ = allowed.send(http.MethodPost, "/actions/replay", url.Values{"event_id": {"dead-2"}}.Encode(),
			"Host", "ops.example.com", "Origin", "http://ops.example.com", "Sec-Fetch-Site", "same-origin")
		if res.StatusCode != http.StatusOK {
			t.Errorf("a confirmation from an allowed host: %d", res.StatusCode)
		}

		anyHost := newClient(t, newHandler(t, db, admin.WithAllowedHosts("*")))
		if res, _ := anyHost.send(http.MethodGet, "/", "", "Host", "whatever.example"); res.StatusCode != http.StatusOK {
			t.Errorf(`WithAllowedHosts("*"): %d`, res.StatusCode)
		}
	})
}

// The 403 page of a refused cross-origin POST carries the headers every
// other page does.
func TestRefusedCrossOriginHasSecurityHeaders(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		res, _ := c.send(http.MethodPost, "/actions/replay", "event_id=dead-1", "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site")
		if res.StatusCode != http.StatusForbidden {
			t.Fatalf("cross-origin POST: %d", res.StatusCode)
		}
		checkSecurityHeaders(t, "the cross-origin refusal", res)
		for _, p := range []string{"/", "/nowhere", "/events?status=bogus"} {
			res, _ := c.send(http.MethodGet, p, "")
			checkSecurityHeaders(t, p, res)
		}
	})
}

// NewHandler refuses allowed hosts it cannot match.
func TestAllowedHostsValidated(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	must(t, outbox.Migrate(db))
	for _, bad := range []string{"", "a b", "http://x", "x/y", "*.example.com", "x:port", "[::1", "x:99999"} {
		if _, err := admin.NewHandler(db, admin.WithAllowedHosts(bad)); err == nil || !strings.Contains(err.Error(), "allowed host") {
			t.Errorf("WithAllowedHosts(%q): %v, want an error", bad, err)
		}
	}
}

// NewHandler warns when it authenticates nobody (no WithMiddleware), and
// not when it has a middleware.
func TestNewHandlerWarnsWithoutAuthentication(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	must(t, outbox.Migrate(db))
	for _, c := range []struct {
		name string
		opts []admin.Option
		warn bool
	}{
		{"no middleware", nil, true},
		{"any host", []admin.Option{admin.WithAllowedHosts("*")}, true},
		{"basic auth", []admin.Option{admin.WithMiddleware(admin.BasicAuth("ops", "pw"))}, false},
	} {
		var logs bytes.Buffer
		newHandler(t, db, append(c.opts, admin.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
		warned := strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "without authentication")
		if warned != c.warn {
			t.Errorf("%s: warned %v, want %v:\n%s", c.name, warned, c.warn, logs.String())
		}
	}
}

// Mounted without WithLogger, the handler still warns that it serves
// without authentication: through slog.Default(), as the library's other
// parts log by default (the warning went nowhere before).
func TestNewHandlerWarnsWithoutALogger(t *testing.T) {
	db := testenv.Open(t, testenv.SQLite)
	must(t, outbox.Migrate(db))
	var logs bytes.Buffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))
	t.Cleanup(func() { slog.SetDefault(prev) })
	newHandler(t, db)
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "without authentication") {
		t.Errorf("no warning on slog.Default() for a handler without authentication or logger:\n%s", logs.String())
	}
}
