package admin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/admin"
	"github.com/gormoutbox/outbox/consume"
)

// memDead is a consumer's dead letter in memory: a reader and replayer.
type memDead struct {
	mu       sync.Mutex
	msgs     []consume.DeadMessage
	replayed []string
	err      error
}

func (d *memDead) DeadLetters(_ context.Context, cursor string, limit int) ([]consume.DeadMessage, string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.err != nil {
		return nil, "", d.err
	}
	start := 0
	if cursor != "" {
		n, err := strconv.Atoi(cursor)
		if err != nil {
			return nil, "", fmt.Errorf("bad cursor %q", cursor)
		}
		start = n
	}
	end := min(start+limit, len(d.msgs))
	if start > end {
		start = end
	}
	next := ""
	if end < len(d.msgs) {
		next = strconv.Itoa(end)
	}
	return append([]consume.DeadMessage(nil), d.msgs[start:end]...), next, nil
}

func (d *memDead) ReplayDead(_ context.Context, ids ...string) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, id := range ids {
		for i, m := range d.msgs {
			if m.ID == id {
				d.msgs = append(d.msgs[:i], d.msgs[i+1:]...)
				d.replayed = append(d.replayed, id)
				n++
				break
			}
		}
	}
	return n, nil
}

// readOnlyDead reads but cannot replay.
type readOnlyDead struct{ d *memDead }

func (r readOnlyDead) DeadLetters(ctx context.Context, c string, n int) ([]consume.DeadMessage, string, error) {
	return r.d.DeadLetters(ctx, c, n)
}

func deadMessages(n int) []consume.DeadMessage {
	out := make([]consume.DeadMessage, n)
	for i := range out {
		out[i] = consume.DeadMessage{ID: fmt.Sprintf("1700000000000-%d", i), Source: "orders / billing",
			Envelope: &outbox.Envelope{ID: fmt.Sprintf("ev-%03d", i), Type: "order.placed"},
			Reason:   "permanent: card declined\x1b[2J", Deliveries: 3, DeadAt: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	}
	return out
}

// A consumer's dead messages show on the overview, which otherwise says
// there is nothing to look at, and on a page of their own, a page at a
// time, control characters escaped.
func TestConsumersDeadLettersAreShown(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		empty := &memDead{}
		full := &memDead{msgs: deadMessages(60)}
		c := newClient(t, newHandler(t, db, admin.WithDeadLetters("redis orders/billing", full),
			admin.WithDeadLetters("nats shipping", empty)))
		code, body := c.get("/")
		if code != http.StatusOK || !strings.Contains(body, "redis orders/billing</a> has dead messages") ||
			strings.Contains(body, "nats shipping</a> has dead") || strings.Contains(body, "Nothing: no dead events") {
			t.Errorf("overview (%d) does not name the consumer with dead messages:\n%s", code, body)
		}
		code, body = c.get("/consumers")
		if code != http.StatusOK || !strings.Contains(body, "dead messages") || !strings.Contains(body, "nothing") {
			t.Errorf("consumers page (%d):\n%s", code, body)
		}
		code, body = c.get("/consumers?source=" + url.QueryEscape("redis orders/billing"))
		if code != http.StatusOK || strings.Count(body, "<tr>") != 51 || !strings.Contains(body, "ev-049") || strings.Contains(body, "ev-050") ||
			!strings.Contains(body, "after=50") || strings.Contains(body, "\x1b") || !strings.Contains(body, "Replay…") {
			t.Errorf("first page (%d): %d rows\n%s", code, strings.Count(body, "<tr>"), body)
		}
		code, body = c.get("/consumers?source=" + url.QueryEscape("redis orders/billing") + "&after=50")
		if code != http.StatusOK || !strings.Contains(body, "ev-059") || strings.Contains(body, "ev-049") || strings.Contains(body, "next page") {
			t.Errorf("second page (%d):\n%s", code, body)
		}
		// With nothing dead anywhere, the overview says so.
		full.mu.Lock()
		full.msgs = nil
		full.mu.Unlock()
		if _, body := c.get("/"); !strings.Contains(body, "Nothing: no dead events (in the outbox or a consumer's dead letter)") {
			t.Errorf("overview with empty dead letters:\n%s", body)
		}
	})
}

// Replay acts on what was confirmed: the message named, once; a repeated
// submit changes nothing (409); a read-only page and a reader that cannot
// replay refuse.
func TestConsumersDeadLetterReplay(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		d := &memDead{msgs: deadMessages(3)}
		c := newClient(t, newHandler(t, db, admin.WithDeadLetters("redis", d), admin.WithDeadLetters("ro", readOnlyDead{d})))
		form := url.Values{"source": {"redis"}, "id": {"1700000000000-1"}, "event_id": {"ev-001"}}
		code, body := c.post("/actions/replay-consumer", form)
		if code != http.StatusOK || !strings.Contains(body, "Hand the dead message 1700000000000-1 (event ev-001) of redis back") || len(d.replayed) != 0 {
			t.Fatalf("unconfirmed POST (%d) replayed %v or showed no confirmation:\n%s", code, d.replayed, body)
		}
		confirmed := c.confirmation("replay-consumer", form)
		code, body = c.post("/actions/replay-consumer", confirmed)
		if code != http.StatusOK || fmt.Sprint(d.replayed) != "[1700000000000-1]" || len(d.msgs) != 2 {
			t.Errorf("confirmed replay (%d): replayed %v, left %d\n%s", code, d.replayed, len(d.msgs), body)
		}
		code, body = c.post("/actions/replay-consumer", confirmed)
		if code != http.StatusConflict || len(d.replayed) != 1 || !strings.Contains(body, "left alone") {
			t.Errorf("repeated replay (%d): replayed %v\n%s", code, d.replayed, body)
		}
		if _, body := c.get("/consumers?source=ro"); strings.Contains(body, "Replay…") {
			t.Error("a reader that cannot replay shows a Replay button")
		}
		ro := url.Values{"source": {"ro"}, "id": {"1700000000000-0"}, "confirm": {"yes"}}
		if code, _ := c.post("/actions/replay-consumer", ro); code != http.StatusBadRequest || len(d.replayed) != 1 {
			t.Errorf("replay through a reader that cannot: %d, replayed %v", code, d.replayed)
		}
		rc := newClient(t, newHandler(t, db, admin.WithReadOnly(), admin.WithDeadLetters("redis", d)))
		if _, body := rc.get("/consumers?source=redis"); strings.Contains(body, "Replay…") {
			t.Error("a read-only page shows a Replay button")
		}
	})
}

// Bad parameters are 400 before any broker call; a broker that cannot be
// read is a 502 on its page and a warning on the overview.
func TestConsumersDeadLetterBadInput(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		broken := &memDead{err: errors.New("dial tcp 10.0.0.9:6379: connection refused")}
		c := newClient(t, newHandler(t, db, admin.WithDeadLetters("ok", &memDead{}), admin.WithDeadLetters("broken", broken)))
		for _, path := range []string{"/consumers?source=nope", "/consumers?source=ok%00", "/consumers?source=%FF",
			"/consumers?source=ok&after=" + strings.Repeat("9", 600), "/consumers?source=ok&after=a%00"} {
			if code, _ := c.get(path); code != http.StatusBadRequest {
				t.Errorf("GET %s: %d, want 400", path, code)
			}
		}
		for _, form := range []url.Values{{"source": {"ok"}, "id": {"x\x00"}, "confirm": {"yes"}}, {"source": {"nope"}, "id": {"1"}, "confirm": {"yes"}},
			{"source": {"ok"}, "confirm": {"yes"}}} {
			if code, _ := c.post("/actions/replay-consumer", form); code != http.StatusBadRequest {
				t.Errorf("POST %v: %d, want 400", form, code)
			}
		}
		if code, body := c.get("/consumers?source=broken"); code != http.StatusBadGateway || !strings.Contains(body, "connection refused") {
			t.Errorf("broken source: %d\n%s", code, body)
		}
		if _, body := c.get("/"); !strings.Contains(body, "broken</a> cannot be read") {
			t.Errorf("overview does not warn of the unreadable dead letter:\n%s", body)
		}
	})
}

func TestWithDeadLettersValidated(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		for _, opts := range [][]admin.Option{
			{admin.WithDeadLetters("", &memDead{})},
			{admin.WithDeadLetters("x", nil)},
			{admin.WithDeadLetters("x", &memDead{}), admin.WithDeadLetters("x", &memDead{})},
			{admin.WithDeadLetters(strings.Repeat("n", 101), &memDead{})},
		} {
			if _, err := admin.NewHandler(db, opts...); !errors.Is(err, admin.ErrInvalidOption) {
				t.Errorf("NewHandler: %v, want ErrInvalidOption", err)
			}
		}
	})
}
