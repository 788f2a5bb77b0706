package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gormoutbox/outbox/relay"
)

// replayAllQuery reads replay-all's filter: the list's, status dead.
func (h *handler) replayAllQuery(r *http.Request) (relay.Filter, filterForm, url.Values, error) {
	eq, form, err := parseFilter(r.PostForm)
	if err != nil {
		return relay.Filter{}, form, nil, err
	}
	v, _ := url.ParseQuery(form.Query)
	v.Set("status", "dead")
	return eq.Filter, form, v, nil
}

func (h *handler) replayAllPlan(r *http.Request) (*plan, *outcome, error) {
	f, form, v, err := h.replayAllQuery(r)
	if err != nil {
		return nil, nil, err
	}
	set, err := h.insp.DeadSetOf(r.Context(), f)
	if err != nil {
		return nil, nil, err
	}
	back := h.cfg.prefix + "/events?" + v.Encode()
	if set.Count == 0 {
		return nil, &outcome{"Replay all: nothing to do", "No dead event matches the filter. Nothing was changed.", back, "Back to the list", true}, nil
	}
	p := &plan{Title: "Replay dead events", Back: back,
		Question: fmt.Sprintf("Replay %d dead event(s)%s?", set.Count, describeFilter(form)),
		Details: []string{"They go back to pending with attempts, last errors and leases cleared; relays deliver them again.",
			"Only these events are replayed: if one of them is replayed, delivered or dies again, or another one dies, before you confirm, none is."},
		Fields: append(hiddenFields(form), hiddenField{"count", itoa(set.Count)}, hiddenField{"digest", set.Digest})}
	return p, nil, nil
}

func (h *handler) replayAllDo(r *http.Request) (outcome, error) {
	f, form, v, err := h.replayAllQuery(r)
	if err != nil {
		return outcome{}, err
	}
	digest, count := r.PostForm.Get("digest"), r.PostForm.Get("count")
	if digest == "" || count == "" {
		return outcome{}, errUnconfirmed
	}
	n, err := strconv.ParseInt(count, 10, 64)
	if err != nil || n < 0 || len(digest) != 32 || strings.Trim(digest, "0123456789abcdef") != "" {
		return outcome{}, inputf("count and digest: %.40q and %.40q are not a confirmed set of dead events", count, digest)
	}
	desc := describeFilter(form)
	done, err := h.insp.ReplayAllIfUnchanged(r.Context(), f, relay.DeadSet{Count: n, Digest: digest})
	if errors.Is(err, relay.ErrChanged) {
		return outcome{Title: "Replay dead events: nothing done", Conflict: true, Link: h.cfg.prefix + "/events?" + v.Encode(), LinkText: "Back to the list",
			Message: fmt.Sprintf("The dead events%s changed meanwhile and were left alone (%v). Nothing was changed: confirm again.", desc, err)}, nil
	}
	if err != nil {
		return outcome{}, err
	}
	v.Set("status", "pending")
	return outcome{Title: "Replay dead events", Message: fmt.Sprintf("Replayed %d dead event(s)%s: they are pending now.", done, desc),
		Link: h.cfg.prefix + "/events?" + v.Encode(), LinkText: "See them"}, nil
}

func (h *handler) purgePlan(r *http.Request) (*plan, *outcome, error) {
	v := strings.TrimSpace(r.PostForm.Get("age"))
	age, err := parseAge(v)
	if err != nil {
		return nil, nil, err
	}
	now, err := h.insp.Now(r.Context())
	if err != nil {
		return nil, nil, err
	}
	before := now.Add(-age)
	p := &plan{Title: "Purge published events", Back: h.cfg.prefix + "/",
		Question: fmt.Sprintf("Delete the published events published more than %s ago (before %s)?", ago(age), when(before)),
		Details: []string{"They are gone for good: they cannot be redelivered afterwards. Other events are never touched.",
			"Events published after that instant are kept, however late you confirm."},
		Fields: []hiddenField{{"age", v}, {"before", before.UTC().Format(time.RFC3339Nano)}}}
	return p, nil, nil
}

func (h *handler) purgeDo(r *http.Request) (outcome, error) {
	v := strings.TrimSpace(r.PostForm.Get("age"))
	age, err := parseAge(v)
	if err != nil {
		return outcome{}, err
	}
	b := r.PostForm.Get("before")
	if b == "" {
		return outcome{}, errUnconfirmed
	}
	before, err := parseTime("before", b)
	if err != nil {
		return outcome{}, err
	}
	n, err := h.insp.PurgePublishedBefore(r.Context(), before)
	if err != nil {
		return outcome{}, err
	}
	return outcome{Title: "Purge published events", Link: h.cfg.prefix + "/", LinkText: "Back to the overview",
		Message: fmt.Sprintf("Deleted %d published event(s) published before %s (more than %s before the confirmation).", n, when(before), ago(age))}, nil
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
