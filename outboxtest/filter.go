package outboxtest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/gormoutbox/outbox"
)

// Filter selects emitted events. Emitted returns the events that every
// filter keeps; the Require helpers narrow their expectation with them.
// Build filters with Like, Type, Aggregate, Status, Since, PayloadSubset,
// PayloadWhere and Where. The zero Filter keeps every event.
type Filter struct {
	checks []check
	err    error // the filter is invalid: the helpers fail the test with it
}

// check is one condition: what it wants, and why a row does not meet it
// ("" when it does).
type check struct {
	desc string
	why  func(r *row) string
}

func invalidFilter(format string, args ...any) Filter {
	return Filter{err: fmt.Errorf("outboxtest: "+format, args...)}
}

// String describes what the filter keeps, as failure messages say it.
func (f Filter) String() string {
	if f.err != nil {
		return f.err.Error()
	}
	if len(f.checks) == 0 {
		return "any event"
	}
	descs := make([]string, len(f.checks))
	for i, c := range f.checks {
		descs[i] = c.desc
	}
	return strings.Join(descs, ", ")
}

// all combines filters into one, or returns the first invalid one's error.
func all(filters ...Filter) (Filter, error) {
	var out Filter
	for _, f := range filters {
		if f.err != nil {
			return Filter{}, f.err
		}
		out.checks = append(out.checks, f.checks...)
	}
	return out, nil
}

// mismatches returns why r is not kept: none when it is.
func (f Filter) mismatches(r *row) []string {
	var why []string
	for _, c := range f.checks {
		if w := c.why(r); w != "" {
			why = append(why, w)
		}
	}
	return why
}

func (f Filter) keeps(r *row) bool { return len(f.mismatches(r)) == 0 }

// Like keeps the events that match e's non-zero fields: ID, Type,
// AggregateType, AggregateID, PartitionKey, TenantID and Topic are equal;
// Version and MaxAttempts are equal when not zero; Payload, when not nil,
// is encoded as Emit encodes it and equal as JSON (same keys and values,
// whatever the spacing, key order or number spelling: jsonb-style rewrites
// match), or byte for byte when either side is not JSON; Headers are a
// subset (each given header is present with that value; the trace headers
// Emit adds do not get in the way); AvailableAt, when not zero, is equal to
// within a microsecond (the precision databases store).
//
// The Require helpers apply Like to their expected event themselves.
func Like(e outbox.Event) Filter {
	var f Filter
	for _, s := range [...]struct {
		col, want string
		have      func(r *row) string
	}{
		{"event_id", e.ID, func(r *row) string { return r.EventID }},
		{"type", e.Type, func(r *row) string { return r.Type }},
		{"aggregate_type", e.AggregateType, func(r *row) string { return r.AggregateType }},
		{"aggregate_id", e.AggregateID, func(r *row) string { return r.AggregateID }},
		{"partition_key", e.PartitionKey, func(r *row) string { return r.PartitionKey }},
		{"tenant_id", e.TenantID, func(r *row) string { return r.TenantID }},
		{"topic", e.Topic, func(r *row) string { return r.Topic }},
	} {
		if s.want != "" {
			f.checks = append(f.checks, equalString(s.col, s.want, s.have))
		}
	}
	if e.Version < 0 || e.MaxAttempts < 0 {
		return invalidFilter("Like: Version and MaxAttempts must not be negative")
	}
	if e.Version != 0 {
		f.checks = append(f.checks, equalInt("version", e.Version, func(r *row) int { return r.Version }))
	}
	if e.MaxAttempts != 0 {
		f.checks = append(f.checks, equalInt("max_attempts", e.MaxAttempts, func(r *row) int { return r.MaxAttempts }))
	}
	if e.Payload != nil {
		c, err := payloadCheck(e.Payload, false)
		if err != nil {
			return invalidFilter("Like: Payload: %v", err)
		}
		f.checks = append(f.checks, c)
	}
	for _, k := range sortedKeys(anyMap(e.Headers)) {
		f.checks = append(f.checks, headerCheck(k, e.Headers[k]))
	}
	if !e.AvailableAt.IsZero() {
		f.checks = append(f.checks, availableCheck(e.AvailableAt))
	}
	return f
}

func equalString(col, want string, have func(r *row) string) check {
	return check{
		desc: fmt.Sprintf("%s %q", col, want),
		why: func(r *row) string {
			if h := have(r); h != want {
				return fmt.Sprintf("%s is %q, want %q", col, truncate(h, maxShown), want)
			}
			return ""
		},
	}
}

func equalInt(col string, want int, have func(r *row) int) check {
	return check{
		desc: fmt.Sprintf("%s %d", col, want),
		why: func(r *row) string {
			if h := have(r); h != want {
				return fmt.Sprintf("%s is %d, want %d", col, h, want)
			}
			return ""
		},
	}
}

func anyMap(h map[string]string) map[string]any {
	m := make(map[string]any, len(h))
	for k, v := range h {
		m[k] = v
	}
	return m
}

func headerCheck(k, want string) check {
	return check{
		desc: fmt.Sprintf("header %q = %q", k, want),
		why: func(r *row) string {
			if r.headerErr != nil {
				return "headers do not decode: " + r.headerErr.Error()
			}
			h, ok := r.env.Headers[k]
			switch {
			case !ok:
				return fmt.Sprintf("header %q is missing, want %q", k, want)
			case h != want:
				return fmt.Sprintf("header %q is %q, want %q", k, truncate(h, maxShown), want)
			}
			return ""
		},
	}
}

func availableCheck(want time.Time) check {
	const layout = "2006-01-02T15:04:05.000000Z07:00"
	want = want.UTC()
	return check{
		desc: "available_at " + want.Format(layout),
		why: func(r *row) string {
			if d := r.AvailableAt.Sub(want); d > -time.Microsecond && d < time.Microsecond {
				return ""
			}
			return fmt.Sprintf("available_at is %s, want %s", r.AvailableAt.UTC().Format(layout), want.Format(layout))
		},
	}
}

// encodePayload encodes an expected payload as Emit stores it.
func encodePayload(v any) ([]byte, error) {
	switch p := v.(type) {
	case []byte:
		return p, nil
	case json.RawMessage:
		return p, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cannot be marshalled to JSON: %w", err)
	}
	return b, nil
}

// payloadCheck compares payloads as JSON (contained in the stored one, with
// subset) or, when the expected one is not JSON, byte for byte.
func payloadCheck(v any, subset bool) (check, error) {
	want, err := encodePayload(v)
	if err != nil {
		return check{}, err
	}
	desc := "payload " + payloadSummary(want)
	if subset {
		desc = "payload containing " + payloadSummary(want)
	}
	wantJSON, jerr := decodeJSON(want)
	if jerr != nil {
		if subset {
			return check{}, fmt.Errorf("is not JSON: %v", jerr)
		}
		return check{desc: desc, why: func(r *row) string {
			if string(r.Payload) != string(want) {
				return fmt.Sprintf("payload is %s, want %s", payloadSummary(r.Payload), payloadSummary(want))
			}
			return ""
		}}, nil
	}
	return check{desc: desc, why: func(r *row) string {
		have, err := decodeJSON(r.Payload)
		if err != nil {
			return fmt.Sprintf("payload is %s, want %s", payloadSummary(r.Payload), payloadSummary(want))
		}
		return jsonDiff("payload", have, wantJSON, subset)
	}}, nil
}

// Type keeps the events of any of the given types.
func Type(types ...string) Filter {
	if len(types) == 0 {
		return invalidFilter("Type: no type given")
	}
	if len(types) == 1 {
		return Like(outbox.Event{Type: types[0]})
	}
	return Filter{checks: []check{{
		desc: fmt.Sprintf("type in %q", types),
		why: func(r *row) string {
			if slices.Contains(types, r.Type) {
				return ""
			}
			return fmt.Sprintf("type is %q, want one of %q", r.Type, types)
		},
	}}}
}

// Aggregate keeps the events about one entity: of that AggregateType and
// AggregateID (an empty id keeps every id of the type).
func Aggregate(aggregateType, aggregateID string) Filter {
	if aggregateType == "" && aggregateID == "" {
		return invalidFilter("Aggregate: empty aggregate type and id")
	}
	return Like(outbox.Event{AggregateType: aggregateType, AggregateID: aggregateID})
}

// Status keeps the events in any of the given delivery states. Without it
// the helpers see events in every state: pending as emitted, published
// once delivered (until the relay's retention deletes them), dead, and so
// on.
func Status(statuses ...outbox.Status) Filter {
	if len(statuses) == 0 {
		return invalidFilter("Status: no status given")
	}
	for _, s := range statuses {
		if !s.Valid() {
			return invalidFilter("Status: %q is not a status (pending, publishing, published, failed or dead)", s)
		}
	}
	return Filter{checks: []check{{
		desc: fmt.Sprintf("status in %v", statuses),
		why: func(r *row) string {
			if slices.Contains(statuses, r.Status) {
				return ""
			}
			return fmt.Sprintf("status is %s, want %s", r.Status, orList(statuses))
		},
	}}}
}

func orList(ss []outbox.Status) string {
	parts := make([]string, len(ss))
	for i, s := range ss {
		parts[i] = string(s)
	}
	return strings.Join(parts, " or ")
}

// Since keeps the events emitted after Mark returned p.
func Since(p Position) Filter {
	return Filter{checks: []check{{
		desc: "emitted since the mark",
		why: func(r *row) string {
			if r.ID > p.id {
				return ""
			}
			return "emitted before the mark"
		},
	}}}
}

// PayloadSubset keeps the events whose payload contains v: v is encoded as
// Emit encodes a payload, and every key of an object in it must be present
// in the stored payload with a matching value (recursively; arrays match
// element by element and must have the same length; numbers match as
// numbers). Keys v does not name are ignored.
func PayloadSubset(v any) Filter {
	if v == nil {
		return invalidFilter("PayloadSubset: nil (use Like with a Payload to match a payload exactly)")
	}
	c, err := payloadCheck(v, true)
	if err != nil {
		return invalidFilter("PayloadSubset: %v", err)
	}
	return Filter{checks: []check{c}}
}

// PayloadWhere keeps the events whose payload decodes (encoding/json) into
// a T for which fn returns true. name says what fn tests, for failure
// messages ("total over 100"). A payload that does not decode is not kept.
func PayloadWhere[T any](name string, fn func(T) bool) Filter {
	if fn == nil {
		return invalidFilter("PayloadWhere: nil function")
	}
	typ := reflect.TypeFor[T]().String()
	return Filter{checks: []check{{
		desc: fmt.Sprintf("payload (as %s) %s", typ, name),
		why: func(r *row) string {
			var v T
			if err := json.Unmarshal(r.Payload, &v); err != nil {
				return fmt.Sprintf("payload does not decode into %s: %v", typ, err)
			}
			if fn(v) {
				return ""
			}
			return fmt.Sprintf("payload is not %s: %s", name, payloadSummary(r.Payload))
		},
	}}}
}

// Where keeps the events for whose envelope fn returns true. name says what
// fn tests, for failure messages. The envelope is what a handler receives,
// with Attempt the delivery attempts made so far.
func Where(name string, fn func(e *outbox.Envelope) bool) Filter {
	if fn == nil {
		return invalidFilter("Where: nil function")
	}
	return Filter{checks: []check{{
		desc: name,
		why: func(r *row) string {
			if fn(r.env) {
				return ""
			}
			return "not " + name
		},
	}}}
}
