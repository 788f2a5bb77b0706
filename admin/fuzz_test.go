package admin_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/admin"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// fuzzRoutes are the paths a fuzzed request starts with; the input's
// tail follows.
var fuzzRoutes = []string{"/", "/events", "/events/", "/keys", "/assets/", "/actions/replay", "/actions/redeliver",
	"/actions/replay-all", "/actions/purge-published", "/actions/skip-head", "/actions/", "/nowhere", "/outbox/events/", "/consumers", "/actions/replay-consumer"}

var fuzzMethods = []string{http.MethodGet, http.MethodPost, http.MethodHead, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// fuzzDBs opens a seeded database per dialect whose server is configured
// (every one with OUTBOX_REQUIRE_SERVICES=1), with events whose ids,
// types, keys and errors hold control characters.
func fuzzDBs(f *testing.F) map[string]http.Handler {
	hs := map[string]http.Handler{}
	for _, d := range testenv.Dialects {
		env := map[string]string{testenv.Postgres: testenv.PostgresEnv, testenv.MySQL: testenv.MySQLEnv}[d]
		if env != "" && os.Getenv(env) == "" && !testenv.Required() {
			continue
		}
		db := testenv.Open(f, d)
		must(f, db.Use(&outbox.Plugin{AutoMigrate: true}))
		seed(f, db)
		testenv.Emit(f, db, 2, func(i int) outbox.Event {
			return outbox.Event{ID: []string{"h\x1b[2J\u202e", "k\x7f\u0085"}[i], Type: "t\x1b]0;x\x07", PartitionKey: "key\u202e\x1b",
				Payload: "p\x1b\u2066", Headers: map[string]string{"x\x1b": "\u202e"}}
		})
		must(f, db.Exec("UPDATE outbox_events SET status = 'dead', last_error = ? WHERE event_id LIKE 'h%'", "e\x1b[31m\r\u009b\u202e").Error)
		must(f, db.Exec("UPDATE outbox_events SET status = 'failed', last_error = ? WHERE event_id LIKE 'k%'", "f\x1b").Error)
		dead := &memDead{msgs: deadMessages(3)}
		dead.msgs[0].ID, dead.msgs[0].Source = "m\x1b[2J\u202e", "src\u0085"
		hs[d] = newHandler(f, db, admin.WithPrefix("/outbox"), admin.WithDeadLetters("redis\u202e", dead))
	}
	return hs
}

// Any request, however malformed or hostile (NUL bytes, invalid UTF-8,
// huge numbers, control characters, any method, any Host, cross-origin),
// answers a page with the security headers, never 500 nor a panic, and
// the page holds no raw control character, on every database.
func FuzzAdmin(f *testing.F) {
	hs := fuzzDBs(f)
	for _, s := range []struct {
		method, route           uint8
		tail, query, body, host string
		cross                   bool
	}{
		{0, 1, "", "type=%00&status=dead", "", "", false},
		{0, 2, "%FF", "payload=1", "", "", false},
		{0, 2, "h%1B%5B2J%E2%80%AE", "payload=1", "", "", false},
		{0, 1, "", "status=dead&cursor=99999999999999999999&order=%00", "", "", false},
		{0, 1, "", "from=0000-01-01&to=9999-12-31T23:59:59-23:59", "", "", false},
		{0, 1, "", "key=key%E2%80%AE%1B&status=failed", "", "", false},
		{0, 3, "", "after=-1", "", "", false},
		{0, 0, "", "", "", "rebind.attacker.example:8080", false},
		{1, 5, "", "", "event_id=dead-1&status=dead&claim_version=1&confirm=yes", "", false},
		{1, 5, "", "", "event_id=dead-1&status=dead&claim_version=99999999999999999999&confirm=yes", "", false},
		{1, 6, "", "", "event_id=%FF&confirm=yes", "", false},
		{1, 7, "", "", "type=%00&confirm=yes&count=1&digest=zz", "", false},
		{1, 7, "", "", "count=-1&digest=00000000000000000000000000000000&confirm=yes", "", false},
		{1, 8, "", "", "age=213504d&confirm=yes", "", false},
		{1, 8, "", "", "age=1h&before=0001-01-01T00:00:00Z&confirm=yes", "", false},
		{1, 9, "", "", "key=key%E2%80%AE%1B&event_id=k%7F%C2%85&status=failed&claim_version=1&confirm=yes", "", false},
		{1, 9, "", "", "key=customer%3A42", "", true},
		{3, 8, "", "", "age=1ms&confirm=yes", "", false},
		{4, 10, "x", "", "%%%", "", false},
		{6, 11, "", "", "", "[::1", false},
		{0, 4, "..%2F..%2Fetc%2Fpasswd", "", "", "", false},
		{0, 12, "h%1B%5B2J%E2%80%AE", "payload=1", "", "", false},
		{0, 13, "", "source=redis%E2%80%AE", "", "", false},
		{0, 13, "", "source=redis%E2%80%AE&after=%00", "", "", false},
		{0, 13, "", "source=%FF&after=99999999999999999999", "", "", false},
		{1, 14, "", "", "source=redis%E2%80%AE&id=m%1B%5B2J%E2%80%AE&event_id=ev-000", "", false},
		{1, 14, "", "", "source=redis%E2%80%AE&id=1700000000000-1&confirm=yes", "", false},
		{1, 14, "", "", "source=redis%E2%80%AE&id=%00&confirm=yes", "", true},
	} {
		f.Add(s.method, s.route, s.tail, s.query, s.body, s.host, s.cross)
	}
	f.Fuzz(func(t *testing.T, method, route uint8, tail, query, body, host string, cross bool) {
		m := fuzzMethods[int(method)%len(fuzzMethods)]
		if method >= 250 {
			m = "M" + strings.Repeat("X", int(method-250)) // an unknown method
		}
		path, err := url.PathUnescape(fuzzRoutes[int(route)%len(fuzzRoutes)] + tail)
		if err != nil {
			path = fuzzRoutes[int(route)%len(fuzzRoutes)] + tail
		}
		for d, h := range hs {
			req := &http.Request{Method: m, URL: &url.URL{Path: path, RawQuery: query}, Host: "127.0.0.1:8080",
				Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body))}
			req = req.WithContext(t.Context())
			if host != "" {
				req.Host = host
			}
			if body != "" {
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			}
			if cross {
				req.Header.Set("Origin", "https://evil.example")
				req.Header.Set("Sec-Fetch-Site", "cross-site")
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			checkFuzzResponse(t, d, req, rec)
		}
	})
}

func checkFuzzResponse(t *testing.T, d string, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	what := d + " " + req.Method + " " + req.URL.String() + " Host " + req.Host
	switch rec.Code {
	case 200, 400, 403, 404, 405, 409:
	default:
		t.Fatalf("%s: %d\n%s", what, rec.Code, rec.Body.String())
	}
	for k, want := range securityHeaders {
		if k == "Cache-Control" && strings.Contains(req.URL.Path, "/assets/") && rec.Code == 200 {
			continue
		}
		if got := rec.Header().Get(k); !strings.Contains(got, want) {
			t.Fatalf("%s: %d without %s %q (%q)", what, rec.Code, k, want, got)
		}
	}
	body := rec.Body.String()
	if !utf8.ValidString(body) {
		t.Fatalf("%s: the page is not UTF-8", what)
	}
	for _, r := range body {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0x7f || r >= 0x80 && r < 0xa0 || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			t.Fatalf("%s: the page holds the raw control character %q", what, r)
		}
	}
}
