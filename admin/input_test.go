package admin_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/testenv"
)

// send sends a request as a browser of the test server's origin does and
// returns the response and its body.
func (c *client) send(method, path, body string, hdr ...string) (*http.Response, string) {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.srv.URL+path, rd)
	must(c.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	must(c.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	must(c.t, err)
	return res, string(b)
}

// Every parameter is checked before any statement runs: a NUL byte,
// invalid UTF-8 or a value longer than its column is a 400 page naming
// the parameter, on every database (PostgreSQL refused NUL with a 500).
func TestMalformedParametersAre400(t *testing.T) {
	long := strings.Repeat("a", 300)
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		for _, p := range []string{
			"/events?type=%00", "/events?type=a%00b", "/events?topic=%FF", "/events?key=%00", "/events?aggregate_type=%C3",
			"/events?aggregate_id=%00", "/events?event_id=%00", "/events?tenant=%FF%FE", "/events?event_id=" + long,
			"/events?from=%00", "/events?to=%FF", "/events?cursor=%00", "/events?cursor=99999999999999999999",
			"/events?status=%00", "/events?order=%00", "/events/%FF", "/events/x%00", "/events/x%00?payload=1",
			"/events/" + long, "/keys?after=%00", "/keys?after=-1",
		} {
			if res, body := c.send(http.MethodGet, p, ""); res.StatusCode != http.StatusBadRequest {
				t.Errorf("GET %s: %d, want 400:\n%.300s", p, res.StatusCode, body)
			}
		}
		for _, p := range []struct{ action, form string }{
			{"redeliver", "event_id=%00"}, {"redeliver", "event_id=%FF&confirm=yes"}, {"replay", "event_id=x%00&confirm=yes"},
			{"replay", "event_id=" + long}, {"skip-head", "key=%00"}, {"skip-head", "key=%FF&confirm=yes"},
			{"replay-all", "type=%00"}, {"replay-all", "key=%FF&confirm=yes"}, {"replay-all", "from=%00"},
			{"purge-published", "age=%00"}, {"purge-published", "age=1h%00"},
		} {
			if res, body := c.send(http.MethodPost, "/actions/"+p.action, p.form); res.StatusCode != http.StatusBadRequest {
				t.Errorf("POST %s %s: %d, want 400:\n%.300s", p.action, p.form, res.StatusCode, body)
			}
		}
		if n := statusCount(t, db, "dead"); n != 2 {
			t.Errorf("%d dead events after malformed requests, want 2", n)
		}
	})
}

func statusCount(t *testing.T, db *gorm.DB, status string) int64 {
	t.Helper()
	var n int64
	must(t, db.Model(&outbox.OutboxEvent{}).Where("status = ?", status).Count(&n).Error)
	return n
}

// Only POST reaches an action: PUT, PATCH, DELETE and the rest are 405,
// so that a proxy rule guarding POST is not bypassed.
func TestActionsArePOSTOnly(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		published := statusCount(t, db, "published")
		for _, m := range []string{http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodGet, http.MethodHead, http.MethodOptions, "PROPFIND"} {
			for _, action := range []string{"purge-published", "replay", "nothing"} {
				res, _ := c.send(m, "/actions/"+action, "age=1ms&event_id=dead-1&confirm=yes")
				if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Allow") != http.MethodPost {
					t.Errorf("%s /actions/%s: %d (Allow %q), want 405 allowing POST", m, action, res.StatusCode, res.Header.Get("Allow"))
				}
			}
		}
		if n := statusCount(t, db, "published"); n != published {
			t.Errorf("%d published events after PUT and PATCH, want %d", n, published)
		}
		if s := statusOf(t, db, "dead-1"); s != outbox.StatusDead {
			t.Errorf("dead-1 is %s", s)
		}
	})
}

// An age beyond what a duration holds is a 400, not a wrapped duration.
func TestPurgeAgeOutOfRange(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		for _, age := range []string{"213504d", "106752d", "9223372036854775808ns", "99999999999h", "-1d", "0d", "d", "1e3d", "1.5d"} {
			res, body := c.send(http.MethodPost, "/actions/purge-published", url.Values{"age": {age}}.Encode())
			if res.StatusCode != http.StatusBadRequest {
				t.Errorf("age %s: %d, want 400:\n%.400s", age, res.StatusCode, body)
			}
		}
		_, body := c.send(http.MethodPost, "/actions/purge-published", "age=106751d")
		contains(t, "the longest age", body, "published more than 106751d")
	})
}

// Control characters in an event (its id, type, key, last error) are
// shown as escapes (\x1b, \u202e), never raw: they would reorder what the
// operator reads. The confirmation's form still carries the id exactly.
func TestControlCharactersAreShownEscaped(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		id := "h\x1b[2J\u202egnp.exe"
		testenv.Emit(t, db, 1, func(int) outbox.Event {
			return outbox.Event{ID: id, Type: "t\u2066", PartitionKey: "k\x1b", Payload: 1}
		})
		must(t, db.Exec("UPDATE outbox_events SET status = 'dead', last_error = ?", "boom\x1b[31m\u202e").Error)
		c := newClient(t, newHandler(t, db))
		for _, p := range []string{"/events/" + url.PathEscape(id), "/events?status=dead", "/"} {
			_, body := c.get(p)
			if i := strings.IndexFunc(body, func(r rune) bool { return r == 0x1b || r == 0x202e || r == 0x2066 }); i >= 0 {
				t.Errorf("%s holds a raw control character: %q", p, body[max(i-40, 0):min(i+40, len(body))])
			}
			if p != "/" && !strings.Contains(body, `boom\x1b[31m\u202e`) {
				t.Errorf("%s does not show the last error escaped", p)
			}
		}
		_, body := c.post("/actions/replay", c.confirmation("replay", url.Values{"event_id": {id}}))
		contains(t, "replay of the escaped id", body, "Replayed 1 event")
		if s := statusOf(t, db, id); s != outbox.StatusPending {
			t.Errorf("the event is %s", s)
		}
	})
}
