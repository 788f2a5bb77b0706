package admin

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/gormoutbox/outbox/consume"
)

// deadSource is a consumer's dead letter given to WithDeadLetters.
type deadSource struct {
	Name   string
	reader consume.DeadLetterReader
}

// replayer returns the source's replayer, if its broker can replay.
func (s deadSource) replayer() (consume.DeadLetterReplayer, bool) {
	rp, ok := s.reader.(consume.DeadLetterReplayer)
	return rp, ok
}

// WithDeadLetters shows the dead letter of a consumer beside the outbox's
// dead events: a message a consumer gave up on leaves its outbox event
// published, so without it the overview would say there is nothing to
// look at. name labels it on the pages (such as "redis shop:orders /
// billing"); r is the broker adapter's reader (outboxredis.NewDeadLetters,
// outboxamqp.NewDeadLetters …). When r can replay
// (consume.DeadLetterReplayer) and the page is not read-only, each
// message has a Replay action. Give it once per dead letter, under
// distinct names.
func WithDeadLetters(name string, r consume.DeadLetterReader) Option {
	return func(c *config) {
		switch {
		case r == nil:
			c.errs = append(c.errs, fmt.Sprintf("dead letters %q: nil reader", name))
		case name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > maxSourceName:
			c.errs = append(c.errs, fmt.Sprintf("dead letters %.80q: the name must be 1 to %d characters of UTF-8", name, maxSourceName))
		}
		for _, s := range c.dead {
			if s.Name == name {
				c.errs = append(c.errs, fmt.Sprintf("dead letters %q given twice", name))
			}
		}
		c.dead = append(c.dead, deadSource{Name: name, reader: r})
	}
}

// maxSourceName bounds a dead letter's name; maxDeadParam a message id or
// cursor given back by a request.
const (
	maxSourceName = 100
	maxDeadParam  = 512
	deadPage      = 50
	// sourceTimeout bounds each broker call of a page.
	sourceTimeout = 5 * time.Second
)

// sourceSummary is one dead letter on the overview and the consumers page:
// whether it holds any message, or why it could not be read.
type sourceSummary struct {
	Name       string
	Any        bool
	Err        string
	Replayable bool
}

// summaries reads the first message of every dead letter.
func (h *handler) summaries(ctx context.Context) []sourceSummary {
	out := make([]sourceSummary, len(h.cfg.dead))
	for i, s := range h.cfg.dead {
		sctx, cancel := context.WithTimeout(ctx, sourceTimeout)
		page, _, err := s.reader.DeadLetters(sctx, "", 1)
		cancel()
		_, rp := s.replayer()
		out[i] = sourceSummary{Name: s.Name, Any: len(page) > 0, Replayable: rp}
		if err != nil {
			out[i].Err = err.Error()
		}
	}
	return out
}

// source returns the dead letter a request names (parameter "source").
func (h *handler) source(v url.Values) (deadSource, error) {
	name, err := textParam(v, "source", maxSourceName, true)
	if err != nil {
		return deadSource{}, err
	}
	for _, s := range h.cfg.dead {
		if s.Name == name {
			return s, nil
		}
	}
	return deadSource{}, inputf("no dead letter named %.80q", name)
}

// consumers lists the consumers' dead letters, or a page of one of them.
func (h *handler) consumers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("source") == "" {
		h.render(w, r, http.StatusOK, "consumers", map[string]any{"Title": "Consumers' dead letters", "Sources": h.summaries(r.Context())})
		return
	}
	s, err := h.source(q)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	after, err := textParam(q, "after", maxDeadParam, false)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), sourceTimeout)
	defer cancel()
	page, next, err := s.reader.DeadLetters(ctx, after, deadPage)
	if err != nil {
		h.fail(w, r, http.StatusBadGateway, fmt.Sprintf("reading the dead letter %s: %v", s.Name, err))
		return
	}
	_, replayable := s.replayer()
	h.render(w, r, http.StatusOK, "consumers", map[string]any{"Title": s.Name + ": dead letters", "Source": s.Name,
		"Messages": page, "Next": next, "Paged": after != "", "Replayable": replayable})
}

// replayDeadPlan confirms the replay of one consumer's dead message.
func (h *handler) replayDeadPlan(r *http.Request) (*plan, *outcome, error) {
	s, id, event, err := h.deadMessageParams(r)
	if err != nil {
		return nil, nil, err
	}
	if _, ok := s.replayer(); !ok {
		return nil, nil, inputf("the dead letter %s cannot replay", s.Name)
	}
	q := fmt.Sprintf("Hand the dead message %s (event %s) of %s back to its consumers?", id, event, s.Name)
	return &plan{Title: "Replay a consumer's dead message", Question: q,
		Details: []string{"It is removed from the dead letter and consumed again, by the consumers' handlers, as a new delivery."},
		Fields:  []hiddenField{{"source", s.Name}, {"id", id}, {"event_id", event}},
		Back:    h.cfg.prefix + "/consumers?source=" + url.QueryEscape(s.Name)}, nil, nil
}

// replayDeadDo replays the confirmed message, if it is still dead.
func (h *handler) replayDeadDo(r *http.Request) (outcome, error) {
	s, id, _, err := h.deadMessageParams(r)
	if err != nil {
		return outcome{}, err
	}
	rp, ok := s.replayer()
	if !ok {
		return outcome{}, inputf("the dead letter %s cannot replay", s.Name)
	}
	ctx, cancel := context.WithTimeout(r.Context(), sourceTimeout)
	defer cancel()
	n, err := rp.ReplayDead(ctx, id)
	if err != nil {
		return outcome{}, fmt.Errorf("replaying %s of %s: %w", id, s.Name, err)
	}
	back := h.cfg.prefix + "/consumers?source=" + url.QueryEscape(s.Name)
	if n == 0 {
		return outcome{Title: "Nothing replayed", Conflict: true, Link: back, LinkText: "back to " + s.Name,
			Message: fmt.Sprintf("The message %s is no longer in the dead letter of %s (replayed or removed meanwhile): left alone.", id, s.Name)}, nil
	}
	return outcome{Title: "Replayed", Link: back, LinkText: "back to " + s.Name,
		Message: fmt.Sprintf("The message %s of %s is handed back to its consumers.", id, s.Name)}, nil
}

// deadMessageParams reads the source, message id and event id of a form.
func (h *handler) deadMessageParams(r *http.Request) (s deadSource, id, event string, err error) {
	if s, err = h.source(r.PostForm); err != nil {
		return
	}
	if id, err = textParam(r.PostForm, "id", maxDeadParam, true); err != nil {
		return
	}
	event, err = textParam(r.PostForm, "event_id", maxDeadParam, false)
	return
}
