package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// plan is an action awaiting confirmation: the confirmation page shows
// it, and its form posts Fields back with confirm=yes. The fields carry
// the state that was shown (an event's status and claim version, a dead
// set's digest, a purge's cutoff), which the action then checks.
type plan struct {
	Title, Question string
	Details         []string
	Action          string
	Fields          []hiddenField
	Back            string
}

// outcome is what an action did; Conflict says it did nothing because
// there was nothing to do or what was confirmed changed meanwhile (409).
type outcome struct {
	Title, Message string
	Link, LinkText string
	Conflict       bool
}

// errUnconfirmed is returned by an action's do when the form does not
// carry a confirmed state: the confirmation page is shown instead.
var errUnconfirmed = errors.New("admin: no confirmed state")

// act is an action: plan reads the request and says what it would do (or
// returns an outcome when there is nothing to do); do runs a submitted
// confirmation, on the state it carries.
type act struct {
	plan func(*http.Request) (*plan, *outcome, error)
	do   func(*http.Request) (outcome, error)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// action runs the POST /actions/<name>: a submitted confirmation
// (confirm=yes with its state) is done; anything else only renders what
// it would do.
func (h *handler) action(w http.ResponseWriter, r *http.Request, name string) {
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		h.fail(w, r, http.StatusBadRequest, "a malformed form: "+err.Error())
		return
	}
	acts := map[string]act{
		"replay": {h.replayPlan, h.replayDo}, "redeliver": {h.redeliverPlan, h.redeliverDo},
		"replay-all": {h.replayAllPlan, h.replayAllDo}, "purge-published": {h.purgePlan, h.purgeDo},
		"skip-head": {h.skipPlan, h.skipDo}, "replay-consumer": {h.replayDeadPlan, h.replayDeadDo},
	}
	a, ok := acts[name]
	if !ok {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("no action %.60q", name))
		return
	}
	if r.PostForm.Get("confirm") == "yes" {
		o, err := a.do(r)
		switch {
		case err == nil:
			h.cfg.log.Info("admin: "+name, "result", o.Message)
			h.done(w, r, o)
			return
		case !errors.Is(err, errUnconfirmed):
			h.failErr(w, r, err)
			return
		}
	}
	p, o, err := a.plan(r)
	switch {
	case err != nil:
		h.failErr(w, r, err)
	case o != nil:
		h.done(w, r, *o)
	default:
		p.Action = name
		h.render(w, r, http.StatusOK, "confirm", map[string]any{"Title": p.Title, "P": p})
	}
}

// done renders an outcome: 409 when it changed nothing.
func (h *handler) done(w http.ResponseWriter, r *http.Request, o outcome) {
	code := http.StatusOK
	if o.Conflict {
		code = http.StatusConflict
	}
	h.render(w, r, code, "done", map[string]any{"Title": o.Title, "O": o})
}

func (h *handler) eventLink(id string) string {
	return h.cfg.prefix + "/events/" + url.PathEscape(id)
}

// stateFields are the fields that carry an event's confirmed state.
func stateFields(e *outbox.OutboxEvent) []hiddenField {
	return []hiddenField{{"event_id", e.EventID}, {"status", string(e.Status)}, {"claim_version", itoa(e.ClaimVersion)}}
}

// confirmedState reads the state a confirmation carries; errUnconfirmed
// when it carries none.
func confirmedState(v url.Values) (relay.EventState, error) {
	id, err := eventIDParam(v)
	if err != nil {
		return relay.EventState{}, err
	}
	st, cv := v.Get("status"), v.Get("claim_version")
	if st == "" || cv == "" {
		return relay.EventState{}, errUnconfirmed
	}
	if !outbox.Status(st).Valid() {
		return relay.EventState{}, inputf("status: %.40q is not a status", st)
	}
	n, err := strconv.ParseInt(cv, 10, 64)
	if err != nil || n < 0 {
		return relay.EventState{}, inputf("claim_version: %.40q is not a claim version", cv)
	}
	return relay.EventState{EventID: id, Status: outbox.Status(st), ClaimVersion: n}, nil
}

// changed is the outcome of a confirmed event that is no longer in the
// state confirmed.
func (h *handler) changed(r *http.Request, verb string, s relay.EventState) outcome {
	now := "no longer in the table"
	if e, err := h.insp.GetEvent(r.Context(), s.EventID); err == nil {
		now = fmt.Sprintf("%s with claim version %d now", e.Status, e.ClaimVersion)
	}
	return outcome{Title: verb + ": nothing done", Conflict: true, Link: h.eventLink(s.EventID), LinkText: "Open the event",
		Message: fmt.Sprintf("Event %s changed meanwhile and was left alone: it was %s with claim version %d when confirmed, it is %s. Nothing was changed.",
			s.EventID, s.Status, s.ClaimVersion, now)}
}

func (h *handler) replayPlan(r *http.Request) (*plan, *outcome, error) {
	return h.resetPlan(r, "Replay", "replayed", outbox.StatusDead)
}

func (h *handler) redeliverPlan(r *http.Request) (*plan, *outcome, error) {
	return h.resetPlan(r, "Redeliver", "redelivered", outbox.StatusPublished, outbox.StatusDead)
}

func (h *handler) replayDo(r *http.Request) (outcome, error) {
	return h.resetDo(r, "Replay", "replayed", h.insp.ReplayIfUnchanged)
}

func (h *handler) redeliverDo(r *http.Request) (outcome, error) {
	return h.resetDo(r, "Redeliver", "redelivered", h.insp.RedeliverIfUnchanged)
}

// resetPlan plans sending one event again, if it is in one of states.
func (h *handler) resetPlan(r *http.Request, verb, done string, states ...outbox.Status) (*plan, *outcome, error) {
	id, err := eventIDParam(r.PostForm)
	if err != nil {
		return nil, nil, err
	}
	e, err := h.insp.GetEvent(r.Context(), id)
	if err != nil {
		return nil, nil, err
	}
	link := h.eventLink(e.EventID)
	if !containsStatus(states, e.Status) {
		return nil, &outcome{verb + ": nothing to do", fmt.Sprintf("Event %s is %s: only %s events can be %s. Nothing was changed.",
			e.EventID, e.Status, statusList(states), done), link, "Back to the event", true}, nil
	}
	p := &plan{Title: verb + " event " + e.EventID, Back: link,
		Question: fmt.Sprintf("%s the %s event %s (%s)?", verb, e.Status, e.EventID, e.Type),
		Details: []string{"It goes back to pending with attempts, last error and lease cleared; a relay delivers it again.",
			"Consumers see it again with the same event id.",
			fmt.Sprintf("Only the event as shown (%s, claim version %d) is %s: if a relay or an operator changes it before you confirm, it is left alone.",
				e.Status, e.ClaimVersion, done)},
		Fields: stateFields(e)}
	if e.PartitionKey != "" {
		p.Details = append(p.Details, "Its key "+e.PartitionKey+" may already have delivered later events: this one arrives after them.")
	}
	return p, nil, nil
}

// resetDo sends the confirmed event again if it is still as confirmed.
func (h *handler) resetDo(r *http.Request, verb, done string,
	reset func(ctx context.Context, states ...relay.EventState) (int64, error)) (outcome, error) {
	s, err := confirmedState(r.PostForm)
	if err != nil {
		return outcome{}, err
	}
	n, err := reset(r.Context(), s)
	if err != nil {
		return outcome{}, err
	}
	if n == 0 {
		return h.changed(r, verb, s), nil
	}
	return outcome{Title: verb, Message: fmt.Sprintf("%s %d event (%s): it is pending now.", capital(done), n, s.EventID),
		Link: h.eventLink(s.EventID), LinkText: "Open the event"}, nil
}

func (h *handler) skipPlan(r *http.Request) (*plan, *outcome, error) {
	key, err := textParam(r.PostForm, "key", outbox.MaxPartitionKeyLen, true)
	if err != nil {
		return nil, nil, err
	}
	heads, err := h.insp.ListEvents(r.Context(), relay.EventQuery{Filter: relay.Filter{PartitionKey: key, Limit: 1}, Status: outbox.StatusFailed})
	if err != nil {
		return nil, nil, err
	}
	back := h.cfg.prefix + "/keys"
	if len(heads.Events) == 0 {
		return nil, &outcome{"Skip: nothing to do", "Key " + key + " has no failed event: it is not blocked. Nothing was changed.",
			back, "Back to the blocked keys", true}, nil
	}
	head := heads.Events[0]
	p := &plan{Title: "Skip the head of key " + key, Back: back,
		Question: fmt.Sprintf("Mark event %s (%s, %d attempts), the failed head of key %s, dead?", head.EventID, head.Type, head.Attempts, key),
		Details: []string{"The key's next events are delivered without it. It stays in the table as a dead event and can be replayed later, out of its key's order.",
			"Last error: " + deref2(head.LastError),
			"Only this event is skipped: if a relay retries or delivers it before you confirm, nothing is."},
		Fields: append([]hiddenField{{"key", key}}, stateFields(&head)...)}
	return p, nil, nil
}

func (h *handler) skipDo(r *http.Request) (outcome, error) {
	key, err := textParam(r.PostForm, "key", outbox.MaxPartitionKeyLen, true)
	if err != nil {
		return outcome{}, err
	}
	s, err := confirmedState(r.PostForm)
	if err != nil {
		return outcome{}, err
	}
	id, err := h.insp.SkipKeyHeadIfUnchanged(r.Context(), key, s)
	if errors.Is(err, relay.ErrChanged) {
		o := h.changed(r, "Skip", s)
		o.Message = fmt.Sprintf("The head of key %s changed meanwhile and was left alone: %s", key, o.Message)
		return o, nil
	}
	if err != nil {
		return outcome{}, err
	}
	return outcome{Title: "Skip", Message: fmt.Sprintf("Event %s is dead now; key %s moves on.", id, key),
		Link: h.eventLink(id), LinkText: "Open the skipped event"}, nil
}

func containsStatus(states []outbox.Status, s outbox.Status) bool {
	for _, st := range states {
		if st == s {
			return true
		}
	}
	return false
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
