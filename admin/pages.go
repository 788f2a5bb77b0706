package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// attentionKeys bounds the blocked keys the overview shows.
const attentionKeys = 10

// overview shows counts, lag, relays, the last hour and what needs
// attention.
func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	s, err := h.insp.GetStats(ctx)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	minutes, err := h.insp.Throughput(ctx, time.Hour)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	blocked, err := h.insp.BlockedKeys(ctx, 0, attentionKeys)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	var stale []relay.RelayStatus
	live := 0
	for _, rs := range s.Relays {
		if rs.Live {
			live++
		} else {
			stale = append(stale, rs)
		}
	}
	consumers := h.summaries(ctx)
	consumersDead := false
	for _, c := range consumers {
		consumersDead = consumersDead || c.Any || c.Err != ""
	}
	h.render(w, r, http.StatusOK, "overview", map[string]any{
		"Title": "Overview", "Stats": s, "Chart": newChart(minutes), "Blocked": blocked, "Stale": stale, "Live": live,
		"Dead": s.Counts[outbox.StatusDead], "Failed": s.Counts[outbox.StatusFailed], "Consumers": consumers,
		"Attention": s.Counts[outbox.StatusDead] > 0 || len(blocked) > 0 || len(stale) > 0 || consumersDead,
	})
}

// events lists events by filter, a page at a time.
func (h *handler) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	eq, form, err := parseFilter(q)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	cursor, err := parseCursor(q, "cursor")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	if eq.Newest {
		eq.BeforeID = cursor
	} else {
		eq.AfterID = cursor
	}
	eq.Limit = 50
	// A key's published events have no index: with any status, the
	// key's unfinished and dead ones are listed (the page says so).
	eq.Unfinished = eq.PartitionKey != "" && eq.Status == ""
	page, err := h.insp.ListEvents(r.Context(), eq)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	var next template.URL
	if page.Next != 0 {
		v, _ := url.ParseQuery(form.Query)
		v.Set("cursor", itoa(page.Next))
		next = template.URL(h.cfg.prefix + "/events?" + v.Encode())
	}
	first := template.URL(h.cfg.prefix + "/events?" + form.Query)
	h.render(w, r, http.StatusOK, "events", map[string]any{
		"Title": "Events", "Events": page.Events, "Form": form, "Fields": filterFields, "Next": next, "First": first, "Paged": cursor != 0,
		"Hidden": hiddenFields(form),
	})
}

// event shows one event; its payload only when asked (?payload=1).
func (h *handler) event(w http.ResponseWriter, r *http.Request, id string) {
	if id == "" {
		h.fail(w, r, http.StatusBadRequest, "a malformed event id")
		return
	}
	if err := checkText("event id", id, outbox.MaxIDLen); err != nil {
		h.failErr(w, r, err)
		return
	}
	e, err := h.insp.GetEvent(r.Context(), id)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	d := map[string]any{"Title": "Event " + e.EventID, "E": e, "Headers": prettyHeaders(e.Headers),
		"PayloadSize": len(e.Payload), "Reveal": r.URL.Query().Get("payload") == "1", "Path": url.PathEscape(e.EventID)}
	if d["Reveal"].(bool) {
		p := e.Payload
		if h.cfg.redact != nil {
			p = h.cfg.redact(e)
		}
		d["Payload"] = prettyPayload(p)
	}
	switch atts, err := h.insp.Attempts(r.Context(), id); {
	case errors.Is(err, outbox.ErrNotMigrated):
		d["NoAttemptLog"] = true
	case err != nil:
		h.failErr(w, r, err)
		return
	default:
		d["Attempts"] = atts
	}
	if hs := headerMap(e.Headers); hs["traceparent"] != "" {
		if parts := strings.Split(hs["traceparent"], "-"); len(parts) == 4 {
			d["TraceID"] = parts[1]
		}
	}
	h.render(w, r, http.StatusOK, "event", d)
}

// keys lists the blocked keys, a page at a time.
func (h *handler) keys(w http.ResponseWriter, r *http.Request) {
	after, err := parseCursor(r.URL.Query(), "after")
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	const n = 50
	keys, err := h.insp.BlockedKeys(r.Context(), after, n)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	next := ""
	if len(keys) == n {
		next = itoa(keys[n-1].Head.ID)
	}
	h.render(w, r, http.StatusOK, "keys", map[string]any{"Title": "Blocked keys", "Keys": keys, "Next": next, "Paged": after != 0})
}

func headerMap(b []byte) map[string]string {
	m := map[string]string{}
	_ = json.Unmarshal(b, &m)
	return m
}

// header is one header of an event.
type header struct{ Name, Value string }

func prettyHeaders(b []byte) []header {
	m := headerMap(b)
	out := make([]header, 0, len(m))
	for k, v := range m {
		out = append(out, header{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// prettyPayload returns JSON indented, other text as it is, and binary
// as a note of its size.
func prettyPayload(p []byte) string {
	if p == nil {
		return "(no payload)"
	}
	var buf bytes.Buffer
	if json.Valid(p) && json.Indent(&buf, p, "", "  ") == nil {
		return buf.String()
	}
	if utf8.Valid(p) {
		return string(p)
	}
	return "(" + itoa(int64(len(p))) + " bytes of binary data)"
}

// hiddenField is a form field carried by a confirmation.
type hiddenField struct{ Name, Value string }

// hiddenFields returns the filter as fields of the replay-all form.
func hiddenFields(f filterForm) []hiddenField {
	v, _ := url.ParseQuery(f.Query)
	out := []hiddenField{}
	for _, k := range sortedKeys(v) {
		if k != "status" && k != "order" {
			out = append(out, hiddenField{k, v.Get(k)})
		}
	}
	return out
}

func sortedKeys(v url.Values) []string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
