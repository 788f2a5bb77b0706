package admin_test

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/admin"
	"github.com/gormoutbox/outbox/internal/testenv"
)

func contains(t *testing.T, what, body string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(body, s) {
			t.Errorf("%s lacks %q", what, s)
		}
	}
}

// The pages answer an operator's questions on every database: what is
// dead, which key is blocked and why, and the payload only when asked.
func TestPages(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		var logs bytes.Buffer
		c := newClient(t, newHandler(t, db, admin.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))

		code, body := c.get("/")
		if code != http.StatusOK {
			t.Fatalf("overview: %d %s", code, body)
		}
		contains(t, "overview", body, "2 dead event(s)", "customer:42", "fail-1", "2 event(s) wait behind it", "<svg", "<rect")

		code, body = c.get("/events?status=dead&order=oldest")
		if code != http.StatusOK {
			t.Fatalf("events: %d %s", code, body)
		}
		contains(t, "dead list", body, "dead-1", "dead-2", "schema mismatch", "Replay all dead events")
		if strings.Contains(body, "ev-00") {
			t.Errorf("the dead list shows other events")
		}
		_, body = c.get("/events?key=customer:42&order=oldest")
		if i, j := strings.Index(body, "fail-1"), strings.Index(body, "ev-11"); i < 0 || j < 0 || i > j {
			t.Errorf("key listing is not oldest first: fail-1 at %d, ev-11 at %d", i, j)
		}
		_, body = c.get("/events?type=invoice.issued&tenant=acme")
		if n := strings.Count(body, "<tr data-href"); n != 10 {
			t.Errorf("type filter: %d rows, want 10", n)
		}
		for _, bad := range []string{"/events?status=lost", "/events?from=yesterday", "/events?cursor=-4", "/events?order=up"} {
			if code, body := c.get(bad); code != http.StatusBadRequest || !strings.Contains(body, "error") {
				t.Errorf("%s: %d, want 400 with a message", bad, code)
			}
		}

		code, body = c.get("/keys")
		contains(t, "blocked keys", body, "customer:42", "fail-1", "broker timeout")

		code, body = c.get("/events/fail-1")
		if code != http.StatusOK {
			t.Fatalf("event: %d %s", code, body)
		}
		contains(t, "event page", body, "broker timeout", "customer:42", "4bf92f3577b34da6a3ce929d0e0e4736", "Show payload")
		attempts := body[strings.Index(body, `id="attempts"`)+1:]
		attempts = attempts[:strings.Index(attempts, "</table>")]
		contains(t, "event page's attempts", attempts, "retried", "seeder", "broker timeout")
		if n := strings.Count(attempts, "<tr><td>"); n != 1 {
			t.Errorf("event page: %d attempts, want 1", n)
		}
		_, body = c.get("/events/ev-11")
		contains(t, "released event's attempts", body, `id="attempts"`, "released")
		_, withPayload := c.get("/events/fail-1?payload=1")
		contains(t, "revealed payload", withPayload, "&#34;card&#34;: &#34;"+secret)
		if code, _ := c.get("/events/no-such"); code != http.StatusNotFound {
			t.Errorf("a missing event: %d, want 404", code)
		}

		for _, p := range []string{"/", "/events", "/events?status=dead", "/keys", "/events/fail-1"} {
			if _, body := c.get(p); strings.Contains(body, secret) {
				t.Errorf("%s shows payload bytes", p)
			}
		}
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log holds payload bytes")
		}
	})
}

var nextRE = regexp.MustCompile(`href="([^"]*)" id="next"`)

// Paging walks every event once, by cursor, in both orders.
func TestPaging(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		testenv.Emit(t, db, 120, func(i int) outbox.Event { return outbox.Event{Type: "t", Payload: i} })
		c := newClient(t, newHandler(t, db))
		for _, order := range []string{"newest", "oldest"} {
			rows, path, pages := 0, "/events?order="+order, 0
			for path != "" && pages < 10 {
				_, body := c.get(path)
				rows += strings.Count(body, "<tr data-href")
				pages++
				path = ""
				if m := nextRE.FindStringSubmatch(body); m != nil {
					path = strings.ReplaceAll(m[1], "&amp;", "&")
				}
			}
			if rows != 120 || pages != 3 {
				t.Errorf("order %s: %d rows in %d pages, want 120 in 3", order, rows, pages)
			}
		}
	})
}

// Every action asks first, says what it would do, and reports what it
// did once its confirmation's form is submitted.
func TestActions(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		status := func(id string) outbox.Status {
			var e outbox.OutboxEvent
			must(t, db.Where("event_id = ?", id).First(&e).Error)
			return e.Status
		}

		code, body := c.post("/actions/replay", url.Values{"event_id": {"dead-1"}})
		if code != http.StatusOK || !strings.Contains(body, "Replay the dead event dead-1") || status("dead-1") != outbox.StatusDead {
			t.Fatalf("replay without confirmation: %d, status %s: %s", code, status("dead-1"), body)
		}
		_, body = c.post("/actions/replay", c.confirmation("replay", url.Values{"event_id": {"dead-1"}}))
		contains(t, "replay", body, "Replayed 1 event (dead-1)")
		if s := status("dead-1"); s != outbox.StatusPending {
			t.Errorf("replayed event is %s", s)
		}
		if code, body := c.post("/actions/replay", url.Values{"event_id": {"dead-1"}}); code != http.StatusConflict || !strings.Contains(body, "Nothing was changed") {
			t.Errorf("replaying a pending event: %d %s", code, body)
		}

		_, body = c.post("/actions/replay-all", url.Values{"type": {"invoice.issued"}})
		contains(t, "replay-all of none", body, "No dead event matches the filter")
		_, body = c.post("/actions/replay-all", url.Values{"type": {"order.created"}})
		contains(t, "replay-all confirmation", body, "Replay 1 dead event(s) with type order.created?")
		_, body = c.post("/actions/replay-all", url.Values{})
		contains(t, "replay-all count", body, "Replay 1 dead event(s)?")
		_, body = c.post("/actions/replay-all", c.confirmation("replay-all", url.Values{}))
		contains(t, "replay-all", body, "Replayed 1 dead event(s)")

		_, body = c.post("/actions/redeliver", c.confirmation("redeliver", url.Values{"event_id": {"ev-00"}}))
		contains(t, "redeliver", body, "Redelivered 1 event (ev-00)")

		_, body = c.post("/actions/skip-head", url.Values{"key": {"customer:42"}})
		contains(t, "skip confirmation", body, "fail-1", "broker timeout")
		_, body = c.post("/actions/skip-head", c.confirmation("skip-head", url.Values{"key": {"customer:42"}}))
		contains(t, "skip", body, "Event fail-1 is dead now")
		if s := status("fail-1"); s != outbox.StatusDead {
			t.Errorf("skipped head is %s", s)
		}

		_, body = c.post("/actions/purge-published", url.Values{"age": {"1s"}})
		contains(t, "purge confirmation", body, "Delete the published events")
		if code, _ := c.post("/actions/purge-published", url.Values{"age": {"soon"}, "confirm": {"yes"}}); code != http.StatusBadRequest {
			t.Errorf("a bad age: %d, want 400", code)
		}
		_, body = c.post("/actions/purge-published", c.confirmation("purge-published", url.Values{"age": {"7d"}}))
		contains(t, "purge", body, "Deleted 0 published event(s)")
		if code, _ := c.post("/actions/nothing", url.Values{}); code != http.StatusNotFound {
			t.Errorf("an unknown action: %d", code)
		}
	})
}

// Read-only refuses changes, other origins may not post, the middleware
// sees every request, and the prefix works with and without a slash and
// behind StripPrefix.
func TestSafetyAndMounting(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		ro := newClient(t, newHandler(t, db, admin.WithReadOnly()))
		if code, _ := ro.post("/actions/replay", url.Values{"event_id": {"dead-1"}, "confirm": {"yes"}}); code != http.StatusMethodNotAllowed {
			t.Errorf("read-only POST: %d, want 405", code)
		}
		if _, body := ro.get("/events/dead-1"); strings.Contains(body, "Replay…") {
			t.Errorf("read-only page offers actions")
		}

		rw := newClient(t, newHandler(t, db))
		code, _ := rw.do(http.MethodPost, "/actions/replay", url.Values{"event_id": {"dead-1"}, "confirm": {"yes"}},
			"Sec-Fetch-Site", "cross-site", "Origin", "https://evil.example")
		if code != http.StatusForbidden {
			t.Errorf("cross-origin POST: %d, want 403", code)
		}
		if code, _ := rw.do(http.MethodDelete, "/events/dead-1", nil); code != http.StatusMethodNotAllowed {
			t.Errorf("DELETE: %d, want 405", code)
		}

		authed := newClient(t, newHandler(t, db, admin.WithMiddleware(admin.BasicAuth("ops", "pw"))))
		if code, _ := authed.get("/"); code != http.StatusUnauthorized {
			t.Errorf("without credentials: %d, want 401", code)
		}
		if code, _ := authed.do(http.MethodGet, "/", nil, "Authorization", "Basic b3BzOnB3"); code != http.StatusOK {
			t.Errorf("with credentials: %d, want 200", code)
		}

		h := newHandler(t, db, admin.WithPrefix("/ops/outbox/"))
		mux := http.NewServeMux()
		mux.Handle("/ops/outbox/", h)
		mux.Handle("/ops/outbox", h)
		mux.Handle("/stripped/", http.StripPrefix("/stripped", newHandler(t, db, admin.WithPrefix("/stripped"))))
		m := newClient(t, mux)
		for p, base := range map[string]string{"/ops/outbox": "/ops/outbox", "/ops/outbox/": "/ops/outbox",
			"/ops/outbox/events?status=dead": "/ops/outbox", "/stripped/": "/stripped", "/stripped/keys": "/stripped"} {
			code, body := m.get(p)
			if code != http.StatusOK || !strings.Contains(body, `href="`+base+`/events"`) || !strings.Contains(body, base+`/assets/style.css`) {
				t.Errorf("%s: %d, links under %s: %v", p, code, base, strings.Contains(body, base+"/events"))
			}
		}
		if code, body := m.get("/ops/outbox/assets/style.css"); code != http.StatusOK || !strings.Contains(body, "body") {
			t.Errorf("asset: %d", code)
		}
	})
}

// NewHandler refuses what it cannot serve.
func TestNewHandlerRefuses(t *testing.T) {
	db := testenv.Open(t, "sqlite")
	if _, err := admin.NewHandler(db); !errors.Is(err, outbox.ErrNotMigrated) {
		t.Errorf("an unmigrated database: %v, want ErrNotMigrated", err)
	}
	must(t, outbox.Migrate(db))
	for _, o := range []admin.Option{admin.WithPrefix("outbox"), admin.WithMiddleware(nil), admin.WithTable("a b"), admin.WithTrustedOrigin("::")} {
		if _, err := admin.NewHandler(db, o); !errors.Is(err, admin.ErrInvalidOption) {
			t.Errorf("a bad option: %v, want ErrInvalidOption", err)
		}
	}
}
