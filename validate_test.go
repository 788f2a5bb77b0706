package outbox_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
	"gorm.io/gorm"

	"github.com/gormoutbox/outbox"
)

func TestInvalidEvents(t *testing.T) {
	long := func(n int) string { return strings.Repeat("é", n) } // counted in characters, not bytes
	cases := []struct {
		field string
		event outbox.Event
	}{
		{"Type", outbox.Event{}},
		{"Type", outbox.Event{Type: "   "}},
		{"Type", outbox.Event{Type: long(256)}},
		{"ID", outbox.Event{Type: "t", ID: long(129)}},
		{"AggregateType", outbox.Event{Type: "t", AggregateType: long(129)}},
		{"AggregateID", outbox.Event{Type: "t", AggregateID: long(256)}},
		{"PartitionKey", outbox.Event{Type: "t", PartitionKey: long(256)}},
		{"TenantID", outbox.Event{Type: "t", TenantID: long(129)}},
		{"Topic", outbox.Event{Type: "t", Topic: long(256)}},
		{"Topic", outbox.Event{Type: "t", Topic: "bad\xff"}},
		{"AggregateID", outbox.Event{Type: "t", AggregateID: "nul\x00"}},
		{"Payload", outbox.Event{Type: "t", Payload: make(chan int)}},
		{"Payload", outbox.Event{Type: "t", Payload: math.Inf(1)}},
		{"Payload", outbox.Event{Type: "t", Payload: func() {}}},
		{"MaxAttempts", outbox.Event{Type: "t", MaxAttempts: -1}},
		{"Version", outbox.Event{Type: "t", Version: -2}},
		{"Headers", outbox.Event{Type: "t", Headers: map[string]string{"": "v"}}},
		{"Headers", outbox.Event{Type: "t", Headers: map[string]string{"k": strings.Repeat("v", 70_000)}}},
	}
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		for _, c := range cases {
			err := db.Transaction(func(tx *gorm.DB) error {
				return outbox.Emit(tx, outbox.Event{Type: "valid"}, c.event)
			})
			if !errors.Is(err, outbox.ErrInvalidEvent) {
				t.Errorf("%s: err = %v, want ErrInvalidEvent", c.field, err)
				continue
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Errorf("error %q does not name the field %s", err, c.field)
			}
		}
		if n := countEvents(t, db); n != 0 {
			t.Errorf("%d events written by invalid emits", n)
		}
		// The limits themselves are accepted, on every dialect.
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{
				Type: long(255), ID: long(128), AggregateType: long(128), AggregateID: long(255),
				PartitionKey: long(255), TenantID: long(128), Topic: long(255),
				Headers: map[string]string{"k": strings.Repeat("v", 60_000)},
			})
		}))
		if n := countEvents(t, db); n != 1 {
			t.Errorf("an event at the column limits was not written")
		}
	})
}

func TestPayloadKinds(t *testing.T) {
	binary := []byte{0x00, 0xff, 0xfe, 'x'}
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		raw := json.RawMessage(`{"b":1,  "a":[1,2]}`)
		must(t, db.Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx,
				outbox.Event{ID: "struct", Type: "t", Payload: struct{ N int }{7}},
				outbox.Event{ID: "raw", Type: "t", Payload: raw},
				outbox.Event{ID: "bytes", Type: "t", Payload: binary},
				outbox.Event{ID: "nil", Type: "t"},
				outbox.Event{ID: "string", Type: "t", Payload: "hi"},
			)
		}))
		got := map[string]string{}
		for _, e := range events(t, db) {
			got[e.EventID] = string(e.Payload)
		}
		want := map[string]string{"struct": `{"N":7}`, "raw": string(raw), "bytes": string(binary), "nil": "", "string": `"hi"`}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("payload %s = %q, want %q (stored as given)", k, got[k], v)
			}
		}
	})
}

func TestTraceContextHeaders(t *testing.T) {
	eachDB(t, func(t *testing.T, db *gorm.DB) {
		sc := trace.NewSpanContext(trace.SpanContextConfig{
			TraceID:    trace.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36},
			SpanID:     trace.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7},
			TraceFlags: trace.FlagsSampled,
		})
		ctx := trace.ContextWithSpanContext(t.Context(), sc)
		must(t, db.WithContext(ctx).Create(&Order{Customer: "traced"}).Error)
		must(t, db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
			return outbox.Emit(tx, outbox.Event{Type: "own", Headers: map[string]string{"traceparent": "mine", "x": "y"}})
		}))
		must(t, db.Create(&Order{Customer: "untraced"}).Error)

		rows := events(t, db)
		headers := func(i int) map[string]string {
			m := map[string]string{}
			if rows[i].Headers != nil {
				must(t, json.Unmarshal(rows[i].Headers, &m))
			}
			return m
		}
		if got, want := headers(0)["traceparent"], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"; got != want {
			t.Errorf("traceparent = %q, want %q", got, want)
		}
		if h := headers(1); h["traceparent"] != "mine" || h["x"] != "y" {
			t.Errorf("the application's headers were overridden: %v", h)
		}
		if rows[2].Headers != nil {
			t.Errorf("headers without a span = %s, want NULL", rows[2].Headers)
		}
	})
}
