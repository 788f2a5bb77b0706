package admin

import (
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// filterFields are the query parameters of the events list that filter
// it, with the relay.Filter field each sets.
var filterFields = []struct {
	Name, Label string
	set         func(f *relay.Filter, v string)
}{
	{"type", "Type", func(f *relay.Filter, v string) { f.Type = v }},
	{"topic", "Topic", func(f *relay.Filter, v string) { f.Topic = v }},
	{"key", "Partition key", func(f *relay.Filter, v string) { f.PartitionKey = v }},
	{"aggregate_type", "Aggregate type", func(f *relay.Filter, v string) { f.AggregateType = v }},
	{"aggregate_id", "Aggregate id", func(f *relay.Filter, v string) { f.AggregateID = v }},
	{"event_id", "Event id", func(f *relay.Filter, v string) { f.EventID = v }},
	{"tenant", "Tenant", func(f *relay.Filter, v string) { f.TenantID = v }},
}

// filterForm is the events list's filter as the form shows it.
type filterForm struct {
	Status   string
	Values   map[string]string // filterFields by name
	From, To string
	Order    string // newest or oldest
	// Query is the filter as a query string, without cursor.
	Query string
	// Set reports whether any filter is set.
	Set bool
}

// timeLayouts are the accepted forms of the from and to parameters, UTC
// unless they say otherwise.
var timeLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04", "2006-01-02"}

func parseTime(name, v string) (time.Time, error) {
	for _, l := range timeLayouts {
		if t, err := time.ParseInLocation(l, v, time.UTC); err == nil {
			return t, nil
		}
	}
	return time.Time{}, inputf("%s: %q is not a time (use 2006-01-02T15:04, UTC, or RFC 3339)", name, v)
}

// parseFilter reads the events list's filter from q.
func parseFilter(q url.Values) (relay.EventQuery, filterForm, error) {
	var eq relay.EventQuery
	form := filterForm{Values: map[string]string{}, Order: "newest"}
	keep := url.Values{}
	if s := strings.TrimSpace(q.Get("status")); s != "" {
		if !outbox.Status(s).Valid() {
			return eq, form, inputf("status: %q is not one of pending, publishing, published, failed, dead", s)
		}
		eq.Status, form.Status, form.Set = outbox.Status(s), s, true
		keep.Set("status", s)
	}
	for _, f := range filterFields {
		v := strings.TrimSpace(q.Get(f.Name))
		if v == "" {
			continue
		}
		if len(v) > 255 || !utf8.ValidString(v) {
			return eq, form, inputf("%s: at most 255 bytes of UTF-8", f.Label)
		}
		f.set(&eq.Filter, v)
		form.Values[f.Name], form.Set = v, true
		keep.Set(f.Name, v)
	}
	for _, tf := range []struct {
		name string
		dst  *time.Time
		show *string
	}{{"from", &eq.CreatedAfter, &form.From}, {"to", &eq.CreatedBefore, &form.To}} {
		if v := strings.TrimSpace(q.Get(tf.name)); v != "" {
			t, err := parseTime(tf.name, v)
			if err != nil {
				return eq, form, err
			}
			*tf.dst, *tf.show, form.Set = t, v, true
			keep.Set(tf.name, v)
		}
	}
	switch o := q.Get("order"); o {
	case "", "newest":
		eq.Newest = true
	case "oldest":
		form.Order = "oldest"
		keep.Set("order", o)
	default:
		return eq, form, inputf("order: %q (want newest or oldest)", o)
	}
	form.Query = keep.Encode()
	return eq, form, nil
}

// parseCursor reads a positive row id parameter (0 when absent).
func parseCursor(q url.Values, name string) (int64, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, inputf("%s: %q is not a positive row id", name, v)
	}
	return n, nil
}
