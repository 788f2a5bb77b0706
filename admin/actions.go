package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// plan is an action awaiting confirmation: the confirmation page shows
// it, and its form posts Fields back with confirm=yes.
type plan struct {
	Title, Question string
	Details         []string
	Action          string
	Fields          []hiddenField
	Back            string
}

// outcome is what an action did.
type outcome struct {
	Title, Message string
	Link, LinkText string
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// action runs the POST /actions/<name>: without confirm=yes it only
// renders what it would do.
func (h *handler) action(w http.ResponseWriter, r *http.Request, name string) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "a malformed form: "+err.Error())
		return
	}
	acts := map[string]func(*http.Request) (*plan, func() (outcome, error), error){
		"replay": h.replayOne, "redeliver": h.redeliverOne, "replay-all": h.replayAll,
		"purge-published": h.purgePublished, "skip-head": h.skipHead,
	}
	act, ok := acts[name]
	if !ok {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no action %q", name))
		return
	}
	p, do, err := act(r)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	if p == nil || r.PostForm.Get("confirm") != "yes" {
		if p == nil { // nothing to do: do says why
			o, _ := do()
			h.render(w, r, http.StatusConflict, "done", map[string]any{"Title": o.Title, "O": o})
			return
		}
		p.Action = name
		h.render(w, r, http.StatusOK, "confirm", map[string]any{"Title": p.Title, "P": p})
		return
	}
	o, err := do()
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	h.cfg.log.Info("admin: "+name, "result", o.Message)
	h.render(w, r, http.StatusOK, "done", map[string]any{"Title": o.Title, "O": o})
}

// nothing is an outcome with nothing to confirm.
func nothing(title, msg, link, text string) (*plan, func() (outcome, error), error) {
	return nil, func() (outcome, error) { return outcome{title, msg, link, text}, nil }, nil
}

func (h *handler) eventFor(r *http.Request) (*outbox.OutboxEvent, error) {
	id := strings.TrimSpace(r.PostForm.Get("event_id"))
	if id == "" {
		return nil, inputf("event_id is required")
	}
	return h.insp.GetEvent(r.Context(), id)
}

func (h *handler) eventLink(e *outbox.OutboxEvent) string {
	return h.cfg.prefix + "/events/" + url.PathEscape(e.EventID)
}

func (h *handler) replayOne(r *http.Request) (*plan, func() (outcome, error), error) {
	return h.resetOne(r, "Replay", "replayed", []outbox.Status{outbox.StatusDead}, h.insp.Replay)
}

func (h *handler) redeliverOne(r *http.Request) (*plan, func() (outcome, error), error) {
	return h.resetOne(r, "Redeliver", "redelivered", []outbox.Status{outbox.StatusPublished, outbox.StatusDead}, h.insp.Redeliver)
}

// resetOne plans sending one event again, if it is in one of states.
func (h *handler) resetOne(r *http.Request, verb, done string, states []outbox.Status,
	reset func(ctx context.Context, ids ...string) (int64, error)) (*plan, func() (outcome, error), error) {
	e, err := h.eventFor(r)
	if err != nil {
		return nil, nil, err
	}
	link := h.eventLink(e)
	ok := false
	for _, s := range states {
		ok = ok || e.Status == s
	}
	if !ok {
		return nothing(verb+": nothing to do", fmt.Sprintf("Event %s is %s: only %s events can be %s. Nothing was changed.",
			e.EventID, e.Status, statusList(states), done), link, "Back to the event")
	}
	p := &plan{Title: verb + " event " + e.EventID, Back: link,
		Question: fmt.Sprintf("%s the %s event %s (%s)?", verb, e.Status, e.EventID, e.Type),
		Details: []string{"It goes back to pending with attempts, last error and lease cleared; a relay delivers it again.",
			"Consumers see it again with the same event id."},
		Fields: []hiddenField{{"event_id", e.EventID}}}
	if e.PartitionKey != "" {
		p.Details = append(p.Details, "Its key "+e.PartitionKey+" may already have delivered later events: this one arrives after them.")
	}
	return p, func() (outcome, error) {
		n, err := reset(r.Context(), e.EventID)
		if err != nil {
			return outcome{}, err
		}
		msg := fmt.Sprintf("%s %d event (%s): it is pending now.", capital(done), n, e.EventID)
		if n == 0 {
			msg = fmt.Sprintf("Event %s changed meanwhile and was left alone.", e.EventID)
		}
		return outcome{verb, msg, link, "Open the event"}, nil
	}, nil
}

func (h *handler) replayAll(r *http.Request) (*plan, func() (outcome, error), error) {
	eq, form, err := parseFilter(r.PostForm)
	if err != nil {
		return nil, nil, err
	}
	eq.Status = outbox.StatusDead
	n, err := h.insp.CountEvents(r.Context(), eq)
	if err != nil {
		return nil, nil, err
	}
	v, _ := url.ParseQuery(form.Query)
	v.Set("status", "dead")
	back := h.cfg.prefix + "/events?" + v.Encode()
	if n == 0 {
		return nothing("Replay all: nothing to do", "No dead event matches the filter. Nothing was changed.", back, "Back to the list")
	}
	desc := describeFilter(form)
	p := &plan{Title: "Replay dead events", Back: back,
		Question: fmt.Sprintf("Replay %d dead event(s)%s?", n, desc),
		Details:  []string{"They go back to pending with attempts, last errors and leases cleared; relays deliver them again."},
		Fields:   hiddenFields(form)}
	return p, func() (outcome, error) {
		done, err := h.insp.ReplayAll(r.Context(), eq.Filter)
		if err != nil {
			return outcome{}, err
		}
		v.Set("status", "pending")
		return outcome{"Replay dead events", fmt.Sprintf("Replayed %d dead event(s)%s: they are pending now.", done, desc),
			h.cfg.prefix + "/events?" + v.Encode(), "See them"}, nil
	}, nil
}

func (h *handler) purgePublished(r *http.Request) (*plan, func() (outcome, error), error) {
	v := strings.TrimSpace(r.PostForm.Get("age"))
	age, err := parseAge(v)
	if err != nil {
		return nil, nil, err
	}
	p := &plan{Title: "Purge published events", Back: h.cfg.prefix + "/",
		Question: "Delete the published events published more than " + ago(age) + " ago?",
		Details:  []string{"They are gone for good: they cannot be redelivered afterwards. Other events are never touched."},
		Fields:   []hiddenField{{"age", v}}}
	return p, func() (outcome, error) {
		n, err := h.insp.PurgePublished(r.Context(), age)
		if err != nil {
			return outcome{}, err
		}
		return outcome{"Purge published events", fmt.Sprintf("Deleted %d published event(s) older than %s.", n, ago(age)),
			h.cfg.prefix + "/", "Back to the overview"}, nil
	}, nil
}

func (h *handler) skipHead(r *http.Request) (*plan, func() (outcome, error), error) {
	key := strings.TrimSpace(r.PostForm.Get("key"))
	if key == "" || len(key) > 255 {
		return nil, nil, inputf("key is required (at most 255 bytes)")
	}
	ctx := r.Context()
	heads, err := h.insp.ListEvents(ctx, relay.EventQuery{Filter: relay.Filter{PartitionKey: key, Limit: 1}, Status: outbox.StatusFailed})
	if err != nil {
		return nil, nil, err
	}
	back := h.cfg.prefix + "/keys"
	if len(heads.Events) == 0 {
		return nothing("Skip: nothing to do", "Key "+key+" has no failed event: it is not blocked. Nothing was changed.", back, "Back to the blocked keys")
	}
	head := heads.Events[0]
	p := &plan{Title: "Skip the head of key " + key, Back: back,
		Question: fmt.Sprintf("Mark event %s (%s, %d attempts), the failed head of key %s, dead?", head.EventID, head.Type, head.Attempts, key),
		Details: []string{"The key's next events are delivered without it. It stays in the table as a dead event and can be replayed later, out of its key's order.",
			"Last error: " + deref2(head.LastError)},
		Fields: []hiddenField{{"key", key}}}
	return p, func() (outcome, error) {
		id, err := h.insp.SkipKeyHead(ctx, key)
		if errors.Is(err, relay.ErrKeyNotBlocked) {
			return outcome{"Skip", err.Error() + ". Nothing was changed.", back, "Back to the blocked keys"}, nil
		}
		if err != nil {
			return outcome{}, err
		}
		return outcome{"Skip", fmt.Sprintf("Event %s is dead now; key %s moves on.", id, key),
			h.cfg.prefix + "/events/" + url.PathEscape(id), "Open the skipped event"}, nil
	}, nil
}

// parseAge reads a duration such as 168h, 90m or 7d.
func parseAge(v string) (time.Duration, error) {
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, perr := strconv.Atoi(days)
		d, err = time.Duration(n)*24*time.Hour, perr
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d <= 0 {
		return 0, inputf("age: %q is not a positive duration (e.g. 168h, 90m or 7d)", v)
	}
	return d, nil
}

func describeFilter(f filterForm) string {
	var parts []string
	for _, ff := range filterFields {
		if v := f.Values[ff.Name]; v != "" {
			parts = append(parts, strings.ToLower(ff.Label)+" "+v)
		}
	}
	if f.From != "" {
		parts = append(parts, "created from "+f.From)
	}
	if f.To != "" {
		parts = append(parts, "created before "+f.To)
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, ", ")
}

func statusList(states []outbox.Status) string {
	s := make([]string, len(states))
	for i, st := range states {
		s[i] = string(st)
	}
	return strings.Join(s, " or ")
}

func capital(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

func deref2(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}
