package admin_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/internal/dialect"
)

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// confirmation posts form to the action and returns the form of the
// confirmation page it answers, as the browser would submit it.
func (c *client) confirmation(action string, form url.Values) url.Values {
	c.t.Helper()
	code, body := c.post("/actions/"+action, form)
	if code != http.StatusOK || !strings.Contains(body, `id="confirm"`) {
		c.t.Fatalf("%s %v: %d, no confirmation:\n%s", action, form, code, body)
	}
	out := url.Values{}
	for _, m := range hiddenRE.FindAllStringSubmatch(body, -1) {
		out.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	if out.Get("confirm") != "yes" {
		c.t.Fatalf("%s: the confirmation's form lacks confirm=yes: %v", action, out)
	}
	return out
}

func statusOf(t *testing.T, db *gorm.DB, id string) outbox.Status {
	t.Helper()
	var e outbox.OutboxEvent
	must(t, db.Where("event_id = ?", id).First(&e).Error)
	return e.Status
}

// deliver does to the event what a relay's claim and successful delivery
// do: a new claim version, published now.
func deliver(t *testing.T, db *gorm.DB, id string) {
	t.Helper()
	must(t, db.Exec("UPDATE outbox_events SET status = 'published', attempts = attempts + 1, claim_version = claim_version + 1, "+
		"last_error = NULL, published_at = available_at WHERE event_id = ?", id).Error)
}

// fail does what a relay's claim and failed delivery do.
func fail(t *testing.T, db *gorm.DB, id, status string) {
	t.Helper()
	must(t, db.Exec("UPDATE outbox_events SET status = ?, attempts = attempts + 1, claim_version = claim_version + 1, "+
		"last_error = 'broker timeout' WHERE event_id = ?", status, id).Error)
}

// Skipping a key's head kills the event the confirmation named or
// nothing: when the relay delivered that head and the key's next event
// failed between the confirmation and its submission, the submission
// leaves the new head alone.
func TestSkipHeadActsOnTheConfirmedHead(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		form := c.confirmation("skip-head", url.Values{"key": {"customer:42"}})
		deliver(t, db, "fail-1")
		fail(t, db, "ev-11", "failed")
		code, body := c.post("/actions/skip-head", form)
		if code != http.StatusConflict || !strings.Contains(body, "changed meanwhile and was left alone") {
			t.Errorf("submitting a head that changed: %d %s", code, body)
		}
		if s := statusOf(t, db, "ev-11"); s != outbox.StatusFailed {
			t.Errorf("the key's new head, which nobody confirmed, is %s", s)
		}
	})
}

// Redelivering acts on the state the confirmation showed: a dead event
// replayed and delivered meanwhile is not redelivered.
func TestRedeliverActsOnTheConfirmedState(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		form := c.confirmation("redeliver", url.Values{"event_id": {"dead-1"}})
		deliver(t, db, "dead-1") // replayed and delivered by someone else
		code, body := c.post("/actions/redeliver", form)
		if code != http.StatusConflict || !strings.Contains(body, "changed meanwhile and was left alone") {
			t.Errorf("submitting an event that changed: %d %s", code, body)
		}
		if s := statusOf(t, db, "dead-1"); s != outbox.StatusPublished {
			t.Errorf("the delivered event is %s: redelivered again", s)
		}
	})
}

// A submission repeated (a reloaded result page) changes nothing, even
// once the event is back in the state it was confirmed in.
func TestRepeatedSubmitChangesNothing(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		submitTwice := func(action string, form url.Values, between func()) {
			t.Helper()
			confirmed := c.confirmation(action, form)
			if code, body := c.post("/actions/"+action, confirmed); code != http.StatusOK {
				t.Fatalf("%s: %d %s", action, code, body)
			}
			between()
			if code, body := c.post("/actions/"+action, confirmed); code != http.StatusConflict || !strings.Contains(body, "Nothing was changed") {
				t.Errorf("%s submitted again: %d %s", action, code, body)
			}
		}

		submitTwice("redeliver", url.Values{"event_id": {"ev-00"}}, func() { deliver(t, db, "ev-00") })
		if s := statusOf(t, db, "ev-00"); s != outbox.StatusPublished {
			t.Errorf("redelivered twice: %s", s)
		}

		submitTwice("replay", url.Values{"event_id": {"dead-1"}}, func() { fail(t, db, "dead-1", "dead") })
		if s := statusOf(t, db, "dead-1"); s != outbox.StatusDead {
			t.Errorf("replayed twice: %s", s)
		}

		submitTwice("replay-all", url.Values{"type": {"order.created"}}, func() { fail(t, db, "dead-2", "dead") })
		if s := statusOf(t, db, "dead-2"); s != outbox.StatusDead {
			t.Errorf("replayed all twice: %s", s)
		}

		// The key's next event fails after the skip: the reload does not
		// skip it too.
		submitTwice("skip-head", url.Values{"key": {"customer:42"}}, func() { fail(t, db, "ev-11", "failed") })
		if s := statusOf(t, db, "ev-11"); s != outbox.StatusFailed {
			t.Errorf("skipped twice: the next head is %s", s)
		}
	})
}

// A purge submitted again deletes nothing that was not older than the
// age when it was confirmed.
func TestRepeatedPurgeDeletesNothingNewer(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		seed(t, db)
		c := newClient(t, newHandler(t, db))
		confirmed := time.Now()
		form := c.confirmation("purge-published", url.Values{"age": {"2s"}})
		if code, body := c.post("/actions/purge-published", form); code != http.StatusOK {
			t.Fatalf("purge: %d %s", code, body)
		}
		// ev-01 was published one second after the purge's cutoff; by the
		// time the form is submitted again it is older than the age.
		must(t, db.Exec("UPDATE outbox_events SET published_at = ? WHERE event_id = 'ev-01'", publishedAt(t, db, confirmed.Add(-time.Second))).Error)
		time.Sleep(time.Until(confirmed.Add(1500 * time.Millisecond)))
		_, body := c.post("/actions/purge-published", form)
		contains(t, "purge submitted again", body, "Deleted 0 published event(s)")
		if s := statusOf(t, db, "ev-01"); s != outbox.StatusPublished {
			t.Errorf("ev-01 is %s", s)
		}
	})
}

// publishedAt binds t as the library writes a published time.
func publishedAt(t *testing.T, db *gorm.DB, at time.Time) any {
	t.Helper()
	kind, err := dialect.Of(db)
	must(t, err)
	return kind.Time(at)
}
