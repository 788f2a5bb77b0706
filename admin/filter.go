package admin

import (
	"net/url"
	"strings"
	"time"

	"github.com/gormoutbox/outbox"
	"github.com/gormoutbox/outbox/relay"
)

// filterFields are the query parameters of the events list that filter
// it, with the relay.Filter field each sets.
var filterFields = []struct {
	Name, Label string
	max         int // the column's size, in characters
	set         func(f *relay.Filter, v string)
}{
	{"type", "Type", outbox.MaxTypeLen, func(f *relay.Filter, v string) { f.Type = v }},
	{"topic", "Topic", outbox.MaxTopicLen, func(f *relay.Filter, v string) { f.Topic = v }},
	{"key", "Partition key", outbox.MaxPartitionKeyLen, func(f *relay.Filter, v string) { f.PartitionKey = v }},
	{"aggregate_type", "Aggregate type", outbox.MaxAggregateTypeLen, func(f *relay.Filter, v string) { f.AggregateType = v }},
	{"aggregate_id", "Aggregate id", outbox.MaxAggregateIDLen, func(f *relay.Filter, v string) { f.AggregateID = v }},
	{"event_id", "Event id", outbox.MaxIDLen, func(f *relay.Filter, v string) { f.EventID = v }},
	{"tenant", "Tenant", outbox.MaxTenantIDLen, func(f *relay.Filter, v string) { f.TenantID = v }},
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

// parseFilter reads the events list's filter from q, every value
// checked (checkText) before any statement.
func parseFilter(q url.Values) (relay.EventQuery, filterForm, error) {
	var eq relay.EventQuery
	form := filterForm{Values: map[string]string{}, Order: "newest"}
	keep := url.Values{}
	if s := strings.TrimSpace(q.Get("status")); s != "" {
		if !outbox.Status(s).Valid() {
			return eq, form, inputf("status: %.40q is not one of pending, publishing, published, failed, dead", s)
		}
		eq.Status, form.Status, form.Set = outbox.Status(s), s, true
		keep.Set("status", s)
	}
	for _, f := range filterFields {
		v, err := textParam(q, f.Name, f.max, false)
		if err != nil {
			return eq, form, err
		}
		if v == "" {
			continue
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
		return eq, form, inputf("order: %.40q (want newest or oldest)", o)
	}
	form.Query = keep.Encode()
	return eq, form, nil
}
